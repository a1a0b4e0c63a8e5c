"""A real Slurm on this machine for the tests: MUNGE, slurmctld and two slurmd nodes, 2 GPUs each.

Debian 12's ``slurm-wlm`` (22.05) runs several slurmd on one host (``slurmd -N <node>``, each
node with its own ``Port``), so no network namespace is needed: nodes ``n1`` and ``n2`` both
have ``NodeAddr=127.0.0.1``, and 4 CPUs each (``config_overrides``: more than this host has,
so that CPU-only servers fit beside the four GPU ones). Their GPUs are Slurm GRES on character
device nodes made with ``mknod`` in the cluster's folder (195,0..3: NVIDIA's major number;
nothing opens them), so Slurm hands out real GRES indices and sets each job's
``CUDA_VISIBLE_DEVICES``. MUNGE runs with
its own key and socket in the folder; nothing under /etc is touched. Needs root (slurmd, mknod).

No accounting database (slurmdbd needs MySQL): ``sacct`` says accounting is disabled, and ended
jobs are read with ``scontrol show job`` (kept ``MinJobAge`` = 600 s).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from scalelab.commands.up import free_port

NODES = ("n1", "n2")
GPUS_PER_NODE = 2
PARTITION = "gpu"
DEBIAN_PACKAGES = "slurm-wlm slurmctld slurmd slurm-client munge"


def missing_commands() -> list[str]:
    """The Slurm and MUNGE commands this machine lacks (empty: the cluster can start)."""
    need = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
    return [c for c in need if shutil.which(c) is None]


class SlurmTestCluster:
    """munged + slurmctld + slurmd ``n1`` and ``n2`` under ``root`` (a temporary folder).

    ``env`` is the environment the Slurm commands need (``SLURM_CONF``). :meth:`start` raises
    ``RuntimeError`` with the daemons' last log lines when the cluster does not come up;
    :meth:`stop` ends every daemon it started (SIGTERM, then SIGKILL).
    """

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._procs: list[subprocess.Popen] = []
        self._pids: list[Path] = []

    def _write_config(self) -> None:
        r = self.root
        for sub in ("run", "state", "dev", *(f"spool/{n}" for n in NODES)):
            (r / sub).mkdir(parents=True, exist_ok=True)
        for i in range(len(NODES) * GPUS_PER_NODE):
            dev = r / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o600 | 0o020000, os.makedev(195, i))
        ctld, node_ports = free_port(), [free_port() for _ in NODES]
        nodes = "\n".join(
            f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=4 "
            f"RealMemory=2000 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
            for n, port in zip(NODES, node_ports, strict=True)
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
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=5
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName={PARTITION} Nodes={",".join(NODES)} Default=YES DefaultTime=60 State=UP
"""
        )
        per_node = "\n".join(
            f"NodeName={n} Name=gpu File={r}/dev/nvidia[{k * GPUS_PER_NODE}-"
            f"{(k + 1) * GPUS_PER_NODE - 1}]"
            for k, n in enumerate(NODES)
        )
        (r / "gres.conf").write_text(per_node + "\n")

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
        self._run("slurmctld", "-f", str(self.conf))
        self._pids.append(r / "run" / "slurmctld.pid")
        for node in NODES:
            self._run("slurmd", "-f", str(self.conf), "-N", node)
            self._pids.append(r / "run" / f"slurmd-{node}.pid")
        deadline = time.monotonic() + timeout_s
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

    def last_logs(self, lines: int = 15) -> str:
        """The last ``lines`` of each daemon's log."""
        out = []
        for log in ("munged.log", "slurmctld.log", *(f"slurmd-{n}.log" for n in NODES)):
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
            subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, check=False,
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
        for proc in self._procs:
            proc.wait(timeout=10)


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
