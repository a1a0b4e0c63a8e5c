"""The operators' guide's Slurm configuration as written: batchspawner's default ``exec_prefix``
(``sudo -E -u {username}``), a hub run by an unprivileged user of its own, a real sudoers rule
in ``/etc/sudoers.d`` that lets that user run ``sbatch``, ``squeue`` and ``scancel`` as the
students and nothing else, and a cluster account per student with a home on the "shared file
system" (a folder here). Jobs, servers and kernels are then the students' own.

Runs on the real Slurm of tests/support/slurmcluster.py and Debian's ``sudo``; needs root (it
makes the accounts and the rule, and removes them at the end)."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests

from scalelab.commands.identity import blocked_for_others, install_paths
from scalelab.common.ports import free_port
from tests.integration.slurm.test_slurm_hub import gone, ready, server_process, slurm_config
from tests.support.hubproc import PlainHub, execute, progress_events
from tests.support.slurmcluster import GPUS_PER_NODE, NODES, PARTITION, SlurmTestCluster

#: The hub's own user, and the students' cluster accounts (JupyterHub's names are the same).
HUB_USER = "slt-hub"
STUDENTS = ("slt-erin", "slt-finn")
#: A student whose cluster account has no home on the shared file system.
HOMELESS = "slt-gail"
#: A student with a home but no folder in the course store, which their server cannot make:
#: the server fails after its job started.
STORELESS = "slt-hal"
SLURM_COMMANDS = ("sbatch", "squeue", "scancel")
#: The course's profiles here: a CPU one with the limits a course gives (Slurm's --mem and
#: --cpus-per-task), and one GPU.
PROFILES = (
    "c.ScaleLabSlurmSpawner.profiles = [\n"
    "    {'slug': 'cpu', 'display_name': 'CPU only', 'default': True, 'mem_limit': '1G',"
    " 'cpu_limit': 1},\n"
    "    {'slug': 'gpu-1', 'display_name': '1 GPU', 'gpus': 1},\n"
    "]\n"
)

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="makes system users and a sudoers rule: root"),
    pytest.mark.skipif(shutil.which("sudo") is None, reason="sudo: ./install.sh installs it"),
    pytest.mark.skipif(
        blocked_for_others(install_paths()) is not None,
        reason="the students' accounts cannot run this checkout's Python; clone elsewhere",
    ),
]


def sudoers_rule() -> str:
    """The rule of the operators' guide (Slurm, jobs as the student), for the test's users."""
    commands = ", ".join(shutil.which(c) or c for c in SLURM_COMMANDS)
    students = ",".join((*STUDENTS, HOMELESS, STORELESS))
    return f"{HUB_USER} ALL=({students}) NOPASSWD:SETENV: {commands}\n"


def _own_folder(path: Path, owner: str) -> None:
    path.mkdir(mode=0o700, parents=True)
    shutil.chown(path, owner, owner)


def _useradd(name: str, home: Path | None) -> None:
    subprocess.run(["userdel", name], capture_output=True, check=False)  # a failed run's
    where = ["--home-dir", str(home)] if home else ["--no-create-home"]
    subprocess.run(
        ["useradd", "--system", "--user-group", "--shell", "/bin/bash", *where, name],
        check=True, capture_output=True,
    )  # fmt: skip
    if home is not None:
        _own_folder(home, name)


@pytest.fixture(scope="module")
def accounts() -> Iterator[Path]:
    """The accounts, their homes under ``<folder>/homes`` and the sudoers rule; the folder."""
    base = Path(tempfile.mkdtemp(prefix="scalelab-sudo-"))
    base.chmod(0o755)
    (base / "homes").mkdir(mode=0o755)
    (base / "store" / "home").mkdir(mode=0o755, parents=True)
    rule = Path("/etc/sudoers.d") / f"scalelab-tests-{os.getpid()}"
    try:
        _useradd(HUB_USER, None)
        for student in STUDENTS:  # a home and a folder in the course store, as a cluster's
            _useradd(student, base / "homes" / student)
            _own_folder(base / "store" / "home" / student, student)
        _useradd(HOMELESS, None)
        _useradd(STORELESS, base / "homes" / STORELESS)
        draft = base / "sudoers"
        draft.write_text(sudoers_rule())
        subprocess.run(["visudo", "-c", "-q", "-f", str(draft)], check=True)
        shutil.copyfile(draft, rule)
        rule.chmod(0o440)
        yield base
    finally:
        rule.unlink(missing_ok=True)
        for name in (HUB_USER, *STUDENTS, HOMELESS, STORELESS):
            subprocess.run(["userdel", name], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def hub(slurm_cluster: SlurmTestCluster, accounts: Path) -> Iterator[PlainHub]:
    state = accounts / "state"
    state.mkdir(mode=0o755)
    # the guide's prefix (batchspawner's default) and no --allow-root; homes and store where
    # the students' accounts have theirs
    config = slurm_config(slurm_cluster, state, PROFILES, root_jobs=False, shared=accounts)
    assert "exec_prefix" not in config and "allow-root" not in config
    plain = PlainHub(state, config, warm_spark=True)
    for path in (state, *state.rglob("*")):
        shutil.chown(path, HUB_USER, HUB_USER)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", str(slurm_cluster.conf))  # the hub's own squeue, scontrol
        try:
            plain.start(user=HUB_USER)
            yield plain
        finally:
            plain.close()
            slurm_cluster.command("scancel", "--full", "-p", PARTITION)


def _jobs_of(cluster: SlurmTestCluster, account: str) -> list[str]:
    """The ids of the jobs of ``account`` in Slurm's queue."""
    return cluster.command("squeue", "-h", "-u", account, "-o", "%i").split()


def test_the_hub_user_may_run_slurms_commands_as_students_and_nothing_else(accounts: Path):
    def as_hub(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["sudo", "-n", "-u", HUB_USER, "--", "sudo", "-n", *argv],
            capture_output=True, text=True, check=False,
        )  # fmt: skip

    allowed = as_hub("-l", "-u", STUDENTS[0], shutil.which("sbatch") or "sbatch")
    assert allowed.returncode == 0, allowed.stderr
    # not a shell as a student, nor Slurm's commands as root
    assert as_hub("-u", STUDENTS[0], "/bin/sh", "-c", "id").returncode != 0
    assert as_hub("-u", "root", shutil.which("squeue") or "squeue").returncode != 0


def test_a_students_job_server_and_kernel_are_their_own_and_stop_cancels_it(
    hub: PlainHub, slurm_cluster: SlurmTestCluster
):
    student = STUDENTS[0]
    assert hub.api("POST", f"/users/{student}").status_code == 201
    started = hub.api("POST", f"/users/{student}/server", json={"user_options": {"profile": "cpu"}})
    assert started.status_code in (201, 202), started.text
    ready(hub, student)
    uid = pwd.getpwnam(student).pw_uid
    proc = server_process(student)
    assert proc.uids().real == uid
    # Slurm's own record: the job was submitted by (and runs as) the student's account
    assert len(_jobs_of(slurm_cluster, student)) == 1
    assert _jobs_of(slurm_cluster, HUB_USER) == []
    home = Path(pwd.getpwnam(student).pw_dir)
    logs = list(home.glob("jupyterhub_slurmspawner_*.log"))
    assert logs and all(log.stat().st_uid == uid for log in logs)
    # a kernel of the server is the student's too
    token = hub.api("POST", f"/users/{student}/tokens", json={"expires_in": 600}).json()["token"]
    url = f"{hub.url}/user/{student}/api/kernels"
    made = requests.post(url, headers={"Authorization": f"token {token}"}, json={}, timeout=120)
    assert made.status_code == 201, made.text
    kernel_id = made.json()["id"]  # in the name of the kernel's connection file
    kernels = [k for k in proc.children(recursive=True) if kernel_id in " ".join(k.cmdline())]
    assert kernels and all(k.uids().real == uid for k in kernels)
    # Stop: scancel through sudo as the student ends the job
    assert hub.api("DELETE", f"/users/{student}/server").status_code in (202, 204)
    gone(hub, student)
    deadline = time.monotonic() + 30
    while _jobs_of(slurm_cluster, student):
        assert time.monotonic() < deadline, slurm_cluster.jobs()
        time.sleep(0.5)


def test_a_student_without_a_home_on_the_cluster_is_told_and_nothing_is_made(
    hub: PlainHub, accounts: Path, slurm_cluster: SlurmTestCluster
):
    assert hub.api("POST", f"/users/{HOMELESS}").status_code == 201
    hub.api("POST", f"/users/{HOMELESS}/server", json={"user_options": {"profile": "cpu"}})
    home = accounts / "homes" / HOMELESS
    events = progress_events(hub, HOMELESS, until=lambda event: event.get("failed"))
    told = events[-1]["message"]
    assert f"Your home folder {home} does not exist" in told, events
    assert "exec_prefix" in (hub.state / "hub.log").read_text(errors="replace")
    assert not home.exists()  # not made by the hub's user, whose it would be
    assert _jobs_of(slurm_cluster, HOMELESS) == []  # nothing submitted


def test_a_server_that_fails_after_its_job_started_is_told_with_slurms_end(
    hub: PlainHub, slurm_cluster: SlurmTestCluster
):
    """Not after the hub's http_timeout: the spawner watches the job while it waits for the
    server's port."""
    assert hub.api("POST", f"/users/{STORELESS}").status_code == 201
    hub.api("POST", f"/users/{STORELESS}/server", json={"user_options": {"profile": "cpu"}})
    events = progress_events(hub, STORELESS, until=lambda event: event.get("failed"))
    told = events[-1]["message"]
    assert "Your server's job ended before it started" in told, events
    assert "FAILED" in told or "exit code 1" in told, told
    log = (hub.state / "hub.log").read_text(errors="replace")
    assert "ended before its server listened" in log
    assert _jobs_of(slurm_cluster, STORELESS) == []


def test_scalelab_doctor_run_as_the_hubs_user_tries_the_prefix_as_a_student(
    hub: PlainHub, accounts: Path
):
    """``sbatch``, ``squeue`` and ``scancel --version`` through the prefix: passes for a student
    of the rule, fails naming sudo's refusal and the rule to write for one outside it; a root
    hub's prefix passes without a rule."""

    def doctor(student: str, user: str | None = HUB_USER) -> tuple[int, str]:
        argv = [sys.executable, "-m", "scalelab", "doctor", "--quick", "--student", student]
        as_user = {"user": user, "group": user, "extra_groups": []} if user else {}
        result = subprocess.run(
            [*argv, "--state-dir", str(accounts / "doctor-state"),
             "--config", str(hub.state / "ops_config.py"), "--port", str(free_port())],
            capture_output=True, text=True, timeout=600, check=False, cwd=accounts,
            env={**os.environ, "HOME": str(accounts)}, **as_user,
        )  # fmt: skip
        return result.returncode, result.stdout + result.stderr

    # the guide's configuration on a root hub: root may sudo, no rule needed
    _, out = doctor(STUDENTS[0], user=None)
    assert "[ ok ] Slurm jobs: submitted as each student (sudo -E -u {username})" in out, out
    assert (
        f"[ ok ] Slurm jobs as a student: root runs sbatch, squeue and scancel as {STUDENTS[0]}"
        in out
    )

    _, out = doctor(STUDENTS[1])
    assert (
        f"[ ok ] Slurm jobs as a student: {HUB_USER} runs sbatch, squeue and scancel as "
        f"{STUDENTS[1]} (sudo -E -u {{username}})" in out.splitlines()
    ), out
    code, out = doctor("root")
    assert code == 1
    [line] = [line for line in out.splitlines() if line.startswith("[FAIL] Slurm jobs as a")]
    assert line.startswith(f"[FAIL] Slurm jobs as a student: {HUB_USER} ran sudo -n -E -u root ")
    assert line.endswith(": exit 1: sudo: a password is required"), line  # sudo's own words
    assert f"{HUB_USER} ALL=(%students) NOPASSWD:SETENV:" in out


#: Run in a student's kernel: its job's memory limit (the job's memory cgroup), what opening
#: each of ``devices`` gives (the job's devices cgroup: ``EPERM`` denied; ``ENXIO`` allowed, no
#: driver here), and what the other student's kernel sockets and their folder give.
PROBE = """
import errno, json, os, pathlib, socket, tempfile
params = json.loads({params!r})

def tried(do, path):
    try:
        do(path)
        return "done"
    except OSError as exc:
        return errno.errorcode[exc.errno]

def opened(path):
    os.close(os.open(path, os.O_RDONLY))

def connect(path):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)

memory = next(l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup") if ":memory:" in l)
job = pathlib.Path("/sys/fs/cgroup/memory" + memory)
while not job.name.startswith("job_"):
    job = job.parent
print(json.dumps({{
    "memory_limit": int((job / "memory.limit_in_bytes").read_text()),
    "devices": {{d: tried(opened, d) for d in params["devices"]}},
    "sockets": {{p: tried(connect, p) for p in params["sockets"]}},
    "listed": tried(os.listdir, params["runtime"]),
    "tmp": tempfile.gettempdir(),
}}))
"""


#: Run in a student's kernel: a process in a session of its own (``setsid``), which must not
#: outlive the job.
SURVIVOR = "import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)\n"


def _kernel(hub: PlainHub, student: str) -> tuple[str, dict, Path]:
    """A new kernel of ``student``'s server: its id, its connection file's content and path
    (read as root from the kernel's command line)."""
    url = f"{hub.url}/user/{student}/api/kernels"
    headers = {"Authorization": f"token {hub.token}"}
    made = requests.post(url, headers=headers, json={}, timeout=120)
    assert made.status_code == 201, made.text
    kernel_id = made.json()["id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for proc in server_process(student).children(recursive=True):
            argv = proc.cmdline()
            if "-f" in argv and kernel_id in argv[argv.index("-f") + 1]:
                path = Path(argv[argv.index("-f") + 1])
                return kernel_id, json.loads(path.read_text()), path
        time.sleep(0.5)
    raise AssertionError(f"no kernel {kernel_id} under {student}'s server")


def _probe(
    hub: PlainHub,
    student: str,
    kernel_id: str,
    devices: list[str],
    sockets: list[str],
    runtime: Path,
) -> dict:
    """:data:`PROBE`'s findings in ``student``'s kernel."""
    params = json.dumps({"devices": devices, "sockets": sockets, "runtime": str(runtime)})
    out = asyncio.run(execute(hub, student, kernel_id, PROBE.format(params=params)))
    assert out["error"] is None and out["stdout"], out
    return json.loads(out["stdout"].splitlines()[-1])  # after the kernel's banner


def _node_devices(cluster: SlurmTestCluster, job_id: str) -> list[str]:
    """The GPU device files of the node ``job_id`` runs on (the test cluster's ``mknod``s)."""
    node = cluster.command("squeue", "-h", "-j", job_id, "-o", "%N").strip()
    first = NODES.index(node) * GPUS_PER_NODE
    return [str(cluster.root / "dev" / f"nvidia{i}") for i in range(first, first + GPUS_PER_NODE)]


def test_two_students_jobs_are_held_to_their_limits_and_gpus_and_closed_to_each_other(
    hub: PlainHub, slurm_cluster: SlurmTestCluster
):
    """Issue 31, Slurm: the profile's limits and GPUs enforced by Slurm's cgroups
    (ConstrainRAMSpace, ConstrainDevices), the kernels' channels in a folder of each job's own,
    and a process started in a new session ended with the job (proctrack/cgroup). Both nodes
    of the test cluster are this one host: the students' jobs share its /tmp and loopback as
    two jobs on one node do."""
    erin, finn = STUDENTS
    for student, profile in ((erin, "cpu"), (finn, "gpu-1")):
        if hub.api("GET", f"/users/{student}").status_code == 404:
            assert hub.api("POST", f"/users/{student}").status_code == 201
        started = hub.api(
            "POST", f"/users/{student}/server", json={"user_options": {"profile": profile}}
        )
        assert started.status_code in (201, 202), started.text
    for student in (erin, finn):
        ready(hub, student)
    (erin_job,) = _jobs_of(slurm_cluster, erin)
    (finn_job,) = _jobs_of(slurm_cluster, finn)
    # the node's loopback is both students': jupyter-server-proxy's proxy/<port> is off
    assert "--ServerApp.jpserver_extensions=jupyter_server_proxy=False" in " ".join(
        server_process(erin).cmdline()
    )
    shown = slurm_cluster.command("scontrol", "show", "job", "-o", erin_job)
    assert "MinMemoryNode=1G" in shown and "NumCPUs=1" in shown, shown

    # Erin's kernel talks to her server over Unix sockets in a folder of her job's own on the
    # node: 0700, hers, not in her home on the shared file system.
    erin_kernel, connection, connection_file = _kernel(hub, erin)
    runtime = connection_file.parent
    assert connection["transport"] == "ipc", connection
    assert Path(connection["ip"]).parent == runtime
    info = runtime.stat()
    assert (info.st_mode & 0o777, info.st_uid) == (0o700, pwd.getpwnam(erin).pw_uid)
    assert runtime.parent == Path("/tmp") and runtime.name.startswith("scalelab-runtime-")
    # ZeroMQ's ipc endpoints: <ip>-<port> (this machine's sandboxed kernel does not list bound
    # sockets in their folder; Erin's own kernel connecting to each below shows they are there)
    channels = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
    sockets = [f"{connection['ip']}-{connection[channel]}" for channel in channels]

    finn_kernel, _, _ = _kernel(hub, finn)
    finn_sees = _probe(
        hub, finn, finn_kernel, _node_devices(slurm_cluster, finn_job), sockets, runtime
    )
    # None of Erin's kernel's sockets, nor their folder, is open to Finn.
    assert set(finn_sees["sockets"].values()) == {"EACCES"}, finn_sees
    assert finn_sees["listed"] == "EACCES"
    # Finn's job: the cluster's default memory (DefMemPerNode=2000 MB), one of its node's GPUs.
    assert finn_sees["memory_limit"] == 2000 * 1024 * 1024
    assert sorted(finn_sees["devices"].values()) == ["ENXIO", "EPERM"], finn_sees

    erin_sees = _probe(
        hub, erin, erin_kernel, _node_devices(slurm_cluster, erin_job), sockets, runtime
    )
    # and a process in a session of its own, which must end with the job
    started = asyncio.run(execute(hub, erin, erin_kernel, SURVIVOR))
    assert started["error"] is None, started
    assert erin_sees["memory_limit"] == 1024**3  # the profile's mem_limit, held by Slurm
    # her temporary folder (a library's per-user cache in it) is in her job's own folder
    assert erin_sees["tmp"] == str(runtime / "tmp")
    assert set(erin_sees["devices"].values()) == {"EPERM"}, erin_sees  # a CPU job: no GPU
    # her own folder and sockets are open to her
    assert erin_sees["listed"] == "done"
    assert set(erin_sees["sockets"].values()) == {"done"}, erin_sees
    uid = pwd.getpwnam(erin).pw_uid
    sleeper = next(
        p for p in psutil.process_iter(["cmdline", "uids"])
        if p.info["cmdline"] == ["sleep", "600"] and p.info["uids"].real == uid
    )  # fmt: skip

    for student in (erin, finn):
        assert hub.api("DELETE", f"/users/{student}/server").status_code in (202, 204)
    for student in (erin, finn):
        gone(hub, student)
    deadline = time.monotonic() + 60
    while sleeper.is_running() or runtime.exists():
        assert time.monotonic() < deadline, (sleeper, list(runtime.glob("*")))
        time.sleep(0.5)
