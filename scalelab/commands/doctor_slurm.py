"""``scalelab doctor``'s checks of a hub whose servers are Slurm jobs (``ScaleLabSlurmSpawner``).

Slurm's client commands on the hub's ``PATH``, Slurm's controller answering (``scontrol ping``,
with the ``SLURM_CONF`` the spawner's ``environment`` gives), and the way jobs are submitted
(the hub's own start-up check: sudo installed, no root servers by accident). Each looks
only; none submits a job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from scalelab.commands.doctor_report import FAIL, OK, WARN, Check

#: The commands the spawner runs; ``sacct`` only to tell how a job ended.
NEEDED = ("sbatch", "squeue", "scancel", "scontrol")
#: Seconds ``scontrol ping`` may take.
PING_TIMEOUT_S = 20.0


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


def check_slurm_controller(env: Mapping[str, str]) -> Check:
    """``scontrol ping`` answers UP for Slurm's controller (the spawner's ``SLURM_CONF``)."""
    conf = env.get("SLURM_CONF", "")
    where = f" (SLURM_CONF={conf})" if conf else ""
    fix = (
        "Start slurmctld, or point the hub at the cluster's slurm.conf: "
        "c.ScaleLabSlurmSpawner.environment = {'SLURM_CONF': '/etc/slurm/slurm.conf'} and the "
        "same SLURM_CONF in the hub's environment."
    )
    try:
        out = subprocess.run(
            ["scontrol", "ping"],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=PING_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("Slurm controller", FAIL, f"scontrol ping{where}: {exc}", fix)
    lines = [" ".join(x.split()) for x in (out.stdout or out.stderr).splitlines() if x.strip()]
    said = next((x for x in lines if x.startswith("Slurmctld")), "; ".join(lines))
    if out.returncode != 0 or " is UP" not in said:
        return Check("Slurm controller", FAIL, f"scontrol ping{where}: {said}", fix)
    return Check("Slurm controller", OK, f"{said}{where}")


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


def slurm_checks(
    exec_prefix: str, args: Sequence[str], environment: Mapping[str, str], env: Mapping[str, str]
) -> list[Check]:
    """Every Slurm check; ``environment`` is the spawner's (its ``SLURM_CONF`` wins over
    ``env``'s, as in the jobs' commands). Never raises."""
    slurm_env = {**env, **{k: v for k, v in environment.items() if k == "SLURM_CONF"}}
    return [
        check_slurm_commands(slurm_env),
        check_slurm_controller(slurm_env),
        check_submission(exec_prefix, args),
    ]
