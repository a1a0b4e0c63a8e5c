"""``scalelab doctor``'s checks of a hub whose servers are Slurm jobs (``ScaleLabSlurmSpawner``).

Slurm's client commands on the hub's ``PATH``, Slurm's controller answering (``scontrol ping``,
with the ``SLURM_CONF`` the spawner's ``environment`` gives), each partition the profiles' jobs
go to (up, and with ``gpu`` GRES where a GPU profile's jobs go: ``sinfo``), and the way jobs are
submitted (the hub's own start-up check: sudo installed, no root servers by accident), that
``exec_prefix`` tried as a student (each command's ``--version`` through it), and that Slurm's
cgroups hold each job to its memory, its GPUs and its processes (``scontrol show config``).
Each looks only; none submits a job.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from scalelab.commands.doctor_report import FAIL, OK, WARN, Check
from scalelab.spawner.slurm_jobs import cgroup_problems, parse_show_config

#: The commands the spawner runs; ``sacct`` only to tell how a job ended.
NEEDED = ("sbatch", "squeue", "scancel", "scontrol")
#: Seconds ``scontrol ping`` may take (and each command tried through ``exec_prefix``).
PING_TIMEOUT_S = 20.0

#: The fix of a prefix that cannot run Slurm's commands as a student (``{user}``: the hub's).
SUDO_FIX = (
    "Let the hub's user run them as the students without a password, e.g. in "
    "/etc/sudoers.d/jupyterhub (visudo -f): {user} ALL=(%students) NOPASSWD:SETENV: "
    "/usr/bin/sbatch, /usr/bin/squeue, /usr/bin/scancel; and run the doctor as that user. See "
    "docs/operators-guide.md, Slurm."
)


def check_slurm_commands(env: Mapping[str, str]) -> Check:
    """Slurm's client commands are on ``env``'s ``PATH``; without ``sacct`` a warning."""
    path = env.get("PATH", os.defpath)
    missing = [c for c in NEEDED if shutil.which(c, path=path) is None]
    fix = (
        "Install Slurm's client commands on the hub's host (Debian: apt-get install "
        "slurm-client) with the cluster's slurm.conf, or put them on the hub's PATH."
    )
    if missing:
        detail = f"not found on the hub's PATH: {', '.join(missing)}"
        return Check("Slurm commands", FAIL, detail, fix)
    if shutil.which("sacct", path=path) is None:
        return Check(
            "Slurm commands",
            WARN,
            f"{', '.join(NEEDED)} found; sacct is not, so a job's end is told only while "
            "slurmctld still shows the job (MinJobAge)",
            "Install sacct (Debian: slurm-client) and Slurm's accounting (slurmdbd).",
        )
    return Check("Slurm commands", OK, f"{', '.join((*NEEDED, 'sacct'))} found")


def _ask_slurm(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess | str:
    """A Slurm client command's completed run (text), or why it did not run (a str)."""
    try:
        return subprocess.run(
            list(argv),
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=PING_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)


def check_slurm_controller(env: Mapping[str, str]) -> Check:
    """``scontrol ping`` answers UP for Slurm's controller (the spawner's ``SLURM_CONF``)."""
    conf = env.get("SLURM_CONF", "")
    where = f" (SLURM_CONF={conf})" if conf else ""
    fix = (
        "Start slurmctld, or point the hub at the cluster's slurm.conf: "
        "c.ScaleLabSlurmSpawner.environment = {'SLURM_CONF': '/etc/slurm/slurm.conf'} and the "
        "same SLURM_CONF in the hub's environment."
    )
    out = _ask_slurm(["scontrol", "ping"], env)
    if isinstance(out, str):
        return Check("Slurm controller", FAIL, f"scontrol ping{where}: {out}", fix)
    lines = [" ".join(x.split()) for x in (out.stdout or out.stderr).splitlines() if x.strip()]
    said = next((x for x in lines if x.startswith("Slurmctld")), "; ".join(lines))
    if out.returncode != 0 or " is UP" not in said:
        return Check("Slurm controller", FAIL, f"scontrol ping{where}: {said}", fix)
    return Check("Slurm controller", OK, f"{said}{where}")


def check_slurm_cgroups(env: Mapping[str, str], *, gpus: bool, memory: bool) -> Check:
    """Slurm's configuration confines each job (:func:`~scalelab.spawner.slurm_jobs.
    cgroup_problems`): to its GPUs where a profile has GPUs, to its ``--mem`` where servers have
    memory limits, and its processes to its end. A warning (jobs still run) naming each
    setting."""
    name = "Slurm confinement"
    fix = "Set them on the cluster (slurm.conf, cgroup.conf); see docs/operators-guide.md, Slurm."
    out = _ask_slurm(["scontrol", "show", "config"], env)
    if isinstance(out, str) or out.returncode != 0:
        said = out if isinstance(out, str) else (out.stderr.strip().splitlines() or ["?"])[-1]
        return Check(name, WARN, f"scontrol show config: {said}", fix)
    problems = cgroup_problems(parse_show_config(out.stdout), gpus=gpus, memory=memory)
    if problems:
        return Check(name, WARN, "; ".join(problems), fix)
    held = ["processes"] + (["GPUs"] if gpus else []) + (["memory"] if memory else [])
    return Check(name, OK, f"each job held to its own {', '.join(held)} (task/cgroup)")


def job_partitions(
    profiles: Sequence[Mapping[str, Any]],
    slurm_profiles: Mapping[str, Mapping[str, Any]],
    slurm_partition: str,
) -> dict[str, bool]:
    """Partition -> whether a GPU profile's jobs go there (pure); ``""`` is the cluster's
    default partition. A profile's ``slurm_profiles`` entry wins over ``slurm_partition``."""
    wanted: dict[str, bool] = {}
    for profile in profiles:
        own = (slurm_profiles.get(str(profile.get("slug", ""))) or {}).get("partition")
        partition = str(own or slurm_partition or "")
        wanted[partition] = wanted.get(partition, False) or int(profile.get("gpus", 0) or 0) > 0
    return wanted


def parse_sinfo(text: str) -> dict[str, dict[str, Any]]:
    """``sinfo -h -o %P|%a|%G`` -> partition -> ``{"default", "up", "gres"}`` (pure): Slurm
    marks the default partition with ``*``; a partition is up where any of its lines says
    ``up``; ``gres`` collects the nodes' GRES (``gpu:2``, ``gpu:h100:4(S:0-1)``)."""
    found: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        name, avail, gres = parts
        entry = found.setdefault(name.rstrip("*"), {"default": False, "up": False, "gres": set()})
        entry["default"] |= name.endswith("*")
        entry["up"] |= avail.strip() == "up"
        entry["gres"] |= {g for g in gres.split(",") if g and g != "(null)"}
    return found


def check_partitions(wanted: Mapping[str, bool], env: Mapping[str, str]) -> Check:
    """Each partition of ``wanted`` (:func:`job_partitions`) exists and is up, and those of
    GPU profiles have ``gpu`` GRES on their nodes."""
    fix = (
        "sinfo lists the cluster's partitions and their GRES: set "
        "c.ScaleLabSlurmSpawner.slurm_partition (or a profile's partition in slurm_profiles) "
        "to one that is up, with gpu GRES (GresTypes=gpu, gres.conf) for the GPU profiles."
    )
    out = _ask_slurm(["sinfo", "-h", "-o", "%P|%a|%G"], env)
    if isinstance(out, str):
        return Check("Slurm partitions", FAIL, f"sinfo: {out}", fix)
    if out.returncode != 0:
        said = (out.stderr.strip().splitlines() or ["no message"])[-1]
        return Check("Slurm partitions", FAIL, f"sinfo: {said}", fix)
    partitions = parse_sinfo(out.stdout)
    default = next((name for name, p in partitions.items() if p["default"]), None)
    problems, fine = [], []
    for asked, gpus in sorted(wanted.items()):
        name = asked or default
        label = f"partition {asked!r}" if asked else f"the default partition ({default!r})"
        if name is None or name not in partitions:
            problems.append(f"{label} does not exist" if asked else "no partition is the default")
        elif not partitions[name]["up"]:
            problems.append(f"{label} is not up")
        elif gpus and not any(g.split(":")[0] == "gpu" for g in partitions[name]["gres"]):
            problems.append(
                f"{label} has no gpu GRES on its nodes, and GPU profiles' jobs go there"
            )
        else:
            gres = ", ".join(sorted(partitions[name]["gres"])) or "no GRES"
            fine.append(f"{label} is up ({gres})")
    if problems:
        return Check("Slurm partitions", FAIL, "; ".join(problems), fix)
    return Check("Slurm partitions", OK, "; ".join(fine))


def check_submission(exec_prefix: str, args: Sequence[str]) -> Check:
    """Jobs can be submitted as configured: the hub's own start-up check
    (``ScaleLabSlurmSpawner.check_host_settings``: the prefix's command is installed, and a root
    hub without a prefix runs its servers as root knowingly, ``--allow-root``)."""
    from scalelab.spawner.slurm import ScaleLabSlurmSpawner

    settings = {"exec_prefix": exec_prefix, "args": list(args)}
    try:
        ScaleLabSlurmSpawner.check_host_settings(settings, "c.ScaleLabSlurmSpawner")
    except ValueError as exc:
        return Check("Slurm jobs", FAIL, str(exc), "See docs/operators-guide.md, Slurm.")
    how = f"as each student ({exec_prefix})" if exec_prefix.split() else "as the hub's own user"
    return Check("Slurm jobs", OK, f"submitted {how}")


def prefixed(exec_prefix: str, student: str, argv: Sequence[str]) -> list[str]:
    """The command batchspawner runs for ``argv`` as ``student``: ``exec_prefix`` with its
    ``{username}``, and sudo's ``-n`` (never ask for a password) after a leading sudo (pure)."""
    words = [w.replace("{username}", student) for w in exec_prefix.split()]
    if words and os.path.basename(words[0]) == "sudo":
        words.insert(1, "-n")
    return [*words, *argv]


def check_prefix_as_student(exec_prefix: str, student: str, env: Mapping[str, str]) -> Check:
    """``exec_prefix`` runs ``sbatch``, ``squeue`` and ``scancel`` as ``student`` without a
    password: each command's ``--version`` (prints its version, changes nothing) through the
    prefix, as the user running the doctor (the hub's user, to be meaningful). An empty
    ``student``: a warning, nothing run."""
    name = "Slurm jobs as a student"
    if not student:
        return Check(
            name,
            WARN,
            f"exec_prefix = {exec_prefix!r} not tried: no student named",
            "Name one with scalelab doctor --student NAME (or set c.Authenticator.allowed_users).",
        )
    me = _user_name()
    for command in ("sbatch", "squeue", "scancel"):
        argv = prefixed(exec_prefix, student, [command, "--version"])
        try:
            out = subprocess.run(
                argv, env=dict(env), capture_output=True, text=True, timeout=PING_TIMEOUT_S,
                stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Check(name, FAIL, f"{' '.join(argv)}: {exc}", SUDO_FIX.format(user=me))
        if out.returncode != 0:
            said = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
            detail = f"{me} ran {' '.join(argv)}: exit {out.returncode}: {said[0]}"
            return Check(name, FAIL, detail, SUDO_FIX.format(user=me))
    return Check(name, OK, f"{me} runs sbatch, squeue and scancel as {student} ({exec_prefix})")


def _user_name() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def slurm_checks(
    exec_prefix: str,
    args: Sequence[str],
    environment: Mapping[str, str],
    env: Mapping[str, str],
    partitions: Mapping[str, bool] | None = None,
    student: str = "",
    memory_limits: bool = False,
) -> list[Check]:
    """Every Slurm check; ``environment`` is the spawner's (its ``SLURM_CONF`` wins over
    ``env``'s, as in the jobs' commands); ``partitions`` from :func:`job_partitions` (None: the
    default partition, for CPU jobs); ``student``, whom the ``exec_prefix`` is tried as (empty:
    a warning); ``memory_limits``: whether servers have memory limits (``mem_limit``, a
    profile's). Never raises."""
    slurm_env = {**env, **{k: v for k, v in environment.items() if k == "SLURM_CONF"}}
    commands = check_slurm_commands(slurm_env)
    controller = check_slurm_controller(slurm_env)
    checks = [commands, controller]
    if commands.status != FAIL and controller.status != FAIL:  # else sinfo says nothing new
        checks.append(check_partitions(partitions or {"": False}, slurm_env))
        gpus = any((partitions or {}).values())
        checks.append(check_slurm_cgroups(slurm_env, gpus=gpus, memory=memory_limits))
    submission = check_submission(exec_prefix, args)
    checks.append(submission)
    if exec_prefix.split() and submission.status != FAIL and commands.status != FAIL:
        checks.append(check_prefix_as_student(exec_prefix, student, slurm_env))
    return checks
