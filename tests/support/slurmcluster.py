"""A real Slurm on this machine for the tests: MUNGE, slurmctld and two slurmd nodes, 2 GPUs each.

Debian 12's ``slurm-wlm`` (22.05) runs several slurmd on one host (``slurmd -N <node>``, each
node with its own ``Port``), so no network namespace is needed: nodes ``n1`` and ``n2`` both
have ``NodeAddr=127.0.0.1``, and 4 CPUs and 8000 MB each (``config_overrides``: more than this
host has, so that CPU-only servers fit beside the four GPU ones; a job without ``--mem`` gets
2000 MB). Their GPUs are Slurm GRES on character device nodes made with ``mknod`` in the
cluster's folder (195,0..3: NVIDIA's major number, mode 0666 as the driver's are; no driver
answers, so an open that the job's devices cgroup allows fails with ``ENXIO`` and one it denies
with ``EPERM``), so Slurm hands out real GRES indices and sets each job's
``CUDA_VISIBLE_DEVICES``. Jobs are confined as on a course cluster: ``proctrack/cgroup``,
``task/cgroup``, memory a consumable resource, ``ConstrainRAMSpace`` and ``ConstrainDevices``
(cgroup v1, which this machine has). MUNGE runs with its own key and socket in the folder;
nothing under /etc is touched. Needs root (slurmd, mknod, cgroups).

Accounting is real: a MariaDB server of the cluster's own (``mariadb-install-db`` into the
folder, ``mariadbd`` on a free port of 127.0.0.1, an ``--init-file`` making the ``slurm`` user)
and ``slurmdbd`` on it, so ``sacct`` tells how each job ended (``TIMEOUT``, ``CANCELLED``...).
slurmctld registers the cluster itself on its first connection. Both add about 5 s to the start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from scalelab.common.ports import free_port

NODES = ("n1", "n2")
GPUS_PER_NODE = 2
PARTITION = "gpu"
DEBIAN_PACKAGES = (
    "slurm-wlm slurmctld slurmd slurm-client slurmdbd munge mariadb-server-core mariadb-client-core"
)
#: The cluster's cgroup.conf (beside slurm.conf, where Slurm reads it).
CGROUP_CONF = """CgroupPlugin=cgroup/v1
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
ConstrainDevices=yes
"""
#: The MariaDB user and database of slurmdbd (``StorageUser``, ``StorageLoc``).
DB_USER, DB_NAME = "slurm", "slurm_acct_db"


def missing_commands() -> list[str]:
    """The Slurm, MUNGE and MariaDB commands this machine lacks (empty: the cluster can start)."""
    need = (
        "munged", "mungekey", "slurmctld", "slurmd", "slurmdbd", "sbatch", "squeue", "scontrol",
        "scancel", "sacct", "mariadbd", "mariadb-install-db",
    )  # fmt: skip
    return [c for c in need if shutil.which(c) is None]


def _wait_for_port(port: int, deadline: float) -> bool:
    """True once something accepts TCP connections on 127.0.0.1:``port`` before ``deadline``
    (``time.monotonic()``)."""
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return True
        time.sleep(0.2)
    return False


class SlurmTestCluster:
    """munged, mariadbd, slurmdbd, slurmctld and slurmd ``n1`` and ``n2`` under ``root`` (a
    temporary folder).

    ``env`` is the environment the Slurm commands need (``SLURM_CONF``). :meth:`start` raises
    ``RuntimeError`` with the daemons' last log lines when the cluster does not come up;
    :meth:`stop` ends every daemon it started (SIGTERM, then SIGKILL).
    """

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._procs: list[subprocess.Popen] = []
        self._logs: list = []
        self._pids: list[Path] = []
        self._t0 = time.time()  # when made: runtime folders since are this cluster's jobs'

    def _write_config(self) -> None:
        r = self.root
        for sub in ("run", "state", "dev", "db", *(f"spool/{n}" for n in NODES)):
            (r / sub).mkdir(parents=True, exist_ok=True)
        for i in range(len(NODES) * GPUS_PER_NODE):
            dev = r / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(195, i))
        ctld, node_ports = free_port(), [free_port() for _ in NODES]
        self.db_port, self.dbd_port = free_port(), free_port()
        # slurmdbd reads slurmdbd.conf beside slurm.conf; it must be its user's alone (0600).
        dbd_conf = r / "slurmdbd.conf"
        dbd_conf.touch(mode=0o600)
        dbd_conf.write_text(
            f"""AuthType=auth/munge
AuthInfo=socket={r}/run/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=root
PidFile={r}/run/slurmdbd.pid
LogFile={r}/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.db_port}
StorageUser={DB_USER}
StorageLoc={DB_NAME}
"""
        )
        (r / "db-init.sql").write_text(
            f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1';\n"
            f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1';\n"
        )
        nodes = "\n".join(
            f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=4 "
            f"RealMemory=8000 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
            for n, port in zip(NODES, node_ports, strict=True)
        )
        partition = (
            f"PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES DefaultTime=60 "
            "DefMemPerNode=2000 State=UP"
        )
        self.conf.write_text(
            f"""ClusterName=scalelab-tests
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={node_ports[0]}
AuthType=auth/munge
AuthInfo=socket={r}/run/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd-%n.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
# Slurm's default: a stopped server's job script gets to remove its runtime folder (EXIT trap)
KillWait=30
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.dbd_port}
AccountingStoragePass={r}/run/munge.sock
{nodes}
{partition}
"""
        )
        per_node = "\n".join(
            f"NodeName={n} Name=gpu File={r}/dev/nvidia[{k * GPUS_PER_NODE}-"
            f"{(k + 1) * GPUS_PER_NODE - 1}]"
            for k, n in enumerate(NODES)
        )
        (r / "gres.conf").write_text(per_node + "\n")
        # A course cluster's confinement (the operators' guide's): each job held to its --mem
        # and to its own GPUs' device files by Slurm's cgroup v1 plugins.
        (r / "cgroup.conf").write_text(CGROUP_CONF)

    def _run(self, *argv: str) -> None:
        subprocess.run(argv, env=self.env, check=True, capture_output=True, timeout=60)

    def start(self, timeout_s: float = 60) -> None:
        """Write the configuration, start the daemons and wait until both nodes are idle."""
        self._write_config()
        r = self.root
        key = r / "munge.key"
        self._run("mungekey", "-c", "-f", "-k", str(key))
        key.chmod(0o600)
        self._run(
            "munged", f"--key-file={key}", f"--socket={r}/run/munge.sock",
            f"--pid-file={r}/run/munged.pid", f"--log-file={r}/munged.log",
            f"--seed-file={r}/run/munge.seed", "--force",
        )  # fmt: skip
        self._pids.append(r / "run" / "munged.pid")
        deadline = time.monotonic() + timeout_s
        self._start_accounting(deadline)
        self._run("slurmctld", "-f", str(self.conf))
        self._pids.append(r / "run" / "slurmctld.pid")
        for node in NODES:
            self._run("slurmd", "-f", str(self.conf), "-N", node)
            self._pids.append(r / "run" / f"slurmd-{node}.pid")
        while time.monotonic() < deadline:
            out = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %t"],
                env=self.env, capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
            if len(states) == len(NODES) and all(s == "idle" for s in states.values()):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the Slurm test cluster did not come up:\n{self.last_logs()}")

    def _start_accounting(self, deadline: float) -> None:
        """A fresh MariaDB in ``db/`` and slurmdbd on it, each waited for on its port."""
        r = self.root
        if not (r / "db" / "mysql").exists():
            self._run(
                "mariadb-install-db", "--no-defaults", f"--datadir={r}/db", "--user=root",
                "--auth-root-authentication-method=normal", "--skip-test-db",
            )  # fmt: skip
        log = open(r / "mariadb.log", "ab")  # the daemon's output, closed in stop()
        argv = [
            "mariadbd", "--no-defaults", f"--datadir={r}/db", "--user=root",
            "--bind-address=127.0.0.1", f"--port={self.db_port}",
            f"--socket={r}/run/mariadb.sock", f"--pid-file={r}/run/mariadb.pid",
            f"--init-file={r}/db-init.sql", "--skip-name-resolve",
            "--innodb-buffer-pool-size=32M", "--skip-log-bin",
        ]  # fmt: skip
        self._procs.append(
            subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        )
        self._logs.append(log)
        if not _wait_for_port(self.db_port, deadline):
            raise RuntimeError(f"MariaDB did not come up:\n{self.last_logs()}")
        self._run("slurmdbd")  # reads slurmdbd.conf beside $SLURM_CONF
        self._pids.append(r / "run" / "slurmdbd.pid")
        if not _wait_for_port(self.dbd_port, deadline):
            raise RuntimeError(f"slurmdbd did not come up:\n{self.last_logs()}")

    def last_logs(self, lines: int = 15) -> str:
        """The last ``lines`` of each daemon's log."""
        out = []
        logs = ("munged.log", "mariadb.log", "slurmdbd.log", "slurmctld.log")
        for log in (*logs, *(f"slurmd-{n}.log" for n in NODES)):
            path = self.root / log
            text = path.read_text(errors="replace").splitlines() if path.exists() else []
            out.append(f"== {log}\n" + "\n".join(text[-lines:]))
        return "\n".join(out)

    def command(self, *argv: str) -> str:
        """Run a Slurm command against the cluster; its stdout."""
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=60, check=True
        ).stdout

    def jobs(self) -> list[str]:
        """``squeue``'s lines (``<id> <state> <node> <gres>``) of every job in the queue."""
        return self.command("squeue", "-h", "-o", "%i %T %N %b").splitlines()

    def stop(self) -> None:
        """Cancel every job, then end every daemon (SIGTERM; SIGKILL after 10 s)."""
        if self.conf.exists():
            subprocess.run(["scancel", "--full", "-p", PARTITION], env=self.env, check=False,
                           capture_output=True, timeout=30)  # fmt: skip
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # servers end with their jobs, before slurmd
                out = subprocess.run(["squeue", "-h", "-t", "PD,R,CG,CF", "-o", "%i"],
                                     env=self.env, capture_output=True, text=True, timeout=30,
                                     check=False)  # fmt: skip
                if out.returncode != 0 or not out.stdout.strip():
                    break
                time.sleep(0.5)
        pids = []
        for pid_file in reversed(self._pids):
            try:
                pids.append(int(pid_file.read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                continue
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        for pid in pids:
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        self._kill_strays()
        for proc in self._procs:  # MariaDB last: slurmdbd writes to it until it ends
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for log in self._logs:
            log.close()
        self._remove_runtime_folders()

    def _remove_runtime_folders(self) -> None:
        """The servers' runtime folders its jobs made in /tmp (``mktemp -d``:
        ``scalelab-runtime-XXXXXX``, see ``scalelab.spawner.slurm.RUNTIME_ON_NODE``) that a job
        killed outright (by :meth:`stop`, or a job of a test that ended with its hub) left: only
        the Slurm tests make folders of that pattern, and only those made while this cluster
        ran."""
        for folder in Path(tempfile.gettempdir()).glob("scalelab-runtime-*"):
            made = folder.stat().st_mtime
            if re.fullmatch(r"scalelab-runtime-[A-Za-z0-9]{6}", folder.name) and made >= self._t0:
                shutil.rmtree(folder, ignore_errors=True)

    def _kill_strays(self) -> None:
        """SIGKILL what the daemons left of this cluster's jobs: a job on a node that went down
        (a failed test that left it down) keeps its slurmstepd and processes after slurmd
        ends. They are found by this cluster's ``SLURM_CONF`` in ``/proc/<pid>/environ``, read
        raw: slurmstepd's process title overwrites the start of that block."""
        needle = f"SLURM_CONF={self.conf}\0".encode()
        strays = []
        for proc in psutil.process_iter():
            try:
                with open(f"/proc/{proc.pid}/environ", "rb") as environ:
                    if needle in environ.read() and proc.pid != os.getpid():
                        strays.append(proc)
            except OSError:
                continue
        for proc in strays:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(strays, timeout=10)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours is not running
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False
