"""What Slurm's commands say, read (pure functions, no I/O): jobs, the pending queue, nodes' GPUs.

:mod:`scalelab.spawner.slurm` runs the commands; these functions read their output and build
the ``sbatch`` options of a profile. Formats are those of Slurm 22.05 (Debian 12's
``slurm-wlm``): ``scontrol show job -d -o <id>``, ``scontrol show node -o``,
``squeue --start -h -t PENDING -o '%i|%Q|%V|%S|%r'`` and ``sacct -n -P -X -o
JobID,State,Reason,ExitCode -j <id>``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scalelab.common.gpu_inventory import slurm_gpu_id as gpu_id

#: ``squeue`` format of :func:`queue_place`: job id, priority, submit time, estimated start,
#: reason.
PENDING_FORMAT = "%i|%Q|%V|%S|%r"
#: Bytes in a MiB, the unit of ``sbatch --mem``'s ``M``.
MIB = 1024 * 1024
#: ``sacct`` fields of :func:`parse_sacct`.
SACCT_FIELDS = "JobID,State,Reason,ExitCode"

#: Job states in which the server may still come up or is up (``squeue``'s long names).
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "RESV_DEL_HOLD"})
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "STAGE_OUT"})

#: How each end state of a job reads for the student (Slurm's state names, ``JobState``).
_ENDINGS = {
    "TIMEOUT": "it reached its time limit",
    "PREEMPTED": "it was preempted by a job of higher priority",
    "NODE_FAIL": "its node failed",
    "BOOT_FAIL": "its node failed to boot",
    "OUT_OF_MEMORY": "it ran out of memory",
    "CANCELLED": "it was cancelled (scancel)",
    "FAILED": "the server exited with an error",
    "COMPLETED": "the server exited",
    "DEADLINE": "it reached its deadline",
    "REVOKED": "it was revoked",
    "SPECIAL_EXIT": "it ended in a special exit state",
}

#: What the usual pending reasons of ``squeue`` (``%r``) mean, for the student.
_REASONS = {
    "Resources": "the GPUs or CPUs it asks for are in use",
    "Priority": "jobs ahead of it in Slurm's order go first",
    "QOSMaxGRESPerUser": "your QOS's GPU limit per user",
    "QOSMaxJobsPerUserLimit": "your QOS's job limit per user",
    "AssocGrpGRES": "your account's GPU limit",
    "ReqNodeNotAvail": "a node it needs is not available",
    "PartitionDown": "the partition is down",
    "BeginTime": "its start time has not come",
}


def explain_reason(reason: str) -> str:
    """A pending reason of Slurm's in words (``"Resources"`` -> ``"the GPUs or CPUs it asks for
    are in use"``); ``""`` for a reason not listed here (Slurm's own word is shown then)."""
    return _REASONS.get(reason, "")


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``scontrol show job -d -o`` shows it.

    Attributes
    ----------
    job_id
        Slurm's job id, ``"12"``.
    state
        ``JobState`` (``"RUNNING"``, ``"PENDING"``, ``"TIMEOUT"``, ...).
    reason
        ``Reason`` (``"None"``, ``"Resources"``, ``"Priority"``, ``"TimeLimit"``...).
    exit_code
        ``ExitCode``, ``"<status>:<signal>"``.
    batch_host
        The node running the batch script (``""`` while pending).
    gpus
        ``{node: (GPU index, ...)}``: the GRES ``gpu`` indices Slurm gave the job on each node
        (``GRES=gpu:1(IDX:0)``), empty while pending or without GPUs.
    start_time
        ``StartTime`` (estimated while pending), or None (``Unknown``, ``N/A``).
    """

    job_id: str
    state: str
    reason: str = "None"
    exit_code: str = "0:0"
    batch_host: str = ""
    gpus: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    start_time: dt.datetime | None = None


@dataclass(frozen=True)
class QueuePlace:
    """A pending job's place among the partition's pending jobs.

    Attributes
    ----------
    position
        1 for the next to start, in Slurm's priority order.
    length
        Pending jobs in all.
    start
        Slurm's estimated start (backfill scheduler), or None when it has none yet.
    reason
        Why it waits (``"Resources"``, ``"Priority"``, ``"QOSMaxGRESPerUser"``...).
    """

    position: int
    length: int
    start: dt.datetime | None
    reason: str


def _time(text: str) -> dt.datetime | None:
    """Slurm's ``2026-12-04T10:20:37`` (local time of the controller), or None."""
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None


def expand_indices(text: str) -> tuple[int, ...]:
    """``"0-1,3"`` -> ``(0, 1, 3)`` (Slurm's GRES index lists).

    Raises
    ------
    ValueError
        Not a list of numbers and ranges.
    """
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return tuple(out)


_NODE_GRES = re.compile(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)")
_GPU_IDX = re.compile(r"gpu(?::[^:(,]+)?:\d+\(IDX:([0-9,\-]+)\)")


def expand_nodes(text: str) -> list[str]:
    """``"n[1-2],gpu7"`` -> ``["n1", "n2", "gpu7"]`` (Slurm's host lists, one bracket level)."""
    nodes: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", text):
        if plain:
            nodes.append(plain)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            width = len(low)
            nodes.extend(f"{prefix}{i:0{width}d}" for i in range(int(low), int(high or low) + 1))
    return nodes


def parse_job(text: str) -> SlurmJob:
    """Read one job from ``scontrol show job -d -o <id>``.

    Raises
    ------
    ValueError
        No ``JobId=`` in the text (the job is unknown: Slurm forgets ended jobs after
        ``MinJobAge``).
    """
    fields: dict[str, str] = {}
    for token in text.split():
        key, eq, value = token.partition("=")
        if eq and key not in fields:
            fields[key] = value
    if "JobId" not in fields:
        raise ValueError(f"no job in Slurm's answer: {text.strip()[:200]!r}")
    gpus: dict[str, tuple[int, ...]] = {}
    for nodes, gres in _NODE_GRES.findall(text):
        indices = tuple(i for m in _GPU_IDX.findall(gres) for i in expand_indices(m))
        if indices:
            for node in expand_nodes(nodes):
                gpus[node] = indices
    host = fields.get("BatchHost", "")
    return SlurmJob(
        job_id=fields["JobId"],
        state=fields.get("JobState", "UNKNOWN"),
        reason=fields.get("Reason", "None"),
        exit_code=fields.get("ExitCode", "0:0"),
        batch_host="" if host in ("", "(null)") else host,
        gpus=gpus,
        start_time=_time(fields.get("StartTime", "")),
    )


def parse_sacct(text: str, job_id: str) -> SlurmJob | None:
    """The job ``job_id`` from ``sacct -n -P -X -o JobID,State,Reason,ExitCode``, or None when
    sacct does not list it. A state such as ``"CANCELLED by 0"`` is read as ``CANCELLED``."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 4 and parts[0] == job_id:
            return SlurmJob(
                job_id=job_id,
                state=parts[1].split()[0] if parts[1] else "UNKNOWN",
                reason=parts[2] or "None",
                exit_code=parts[3],
            )
    return None


def queue_place(text: str, job_id: str) -> QueuePlace | None:
    """``job_id``'s place among the pending jobs of
    ``squeue -h -t PENDING -o '%i|%Q|%V|%S|%r'`` (:data:`PENDING_FORMAT`): ordered as Slurm's
    scheduler takes them, by priority (higher first), then submit time, then job id. None when
    the job is not pending."""
    rows = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        priority = int(parts[1]) if parts[1].isdigit() else 0
        rows.append((-priority, parts[2], int(parts[0]), parts[3], parts[4]))
    rows.sort()
    for position, (_, _, jid, start, reason) in enumerate(rows, 1):
        if str(jid) == job_id:
            return QueuePlace(position, len(rows), _time(start), reason)
    return None


def node_gpus(text: str) -> list[tuple[str, str, int]]:
    """``(node, NodeAddr, GPU count)`` of each node of ``scontrol show node -o`` with
    ``Gres=gpu:N`` (or ``gpu:<type>:N``); nodes without GPUs are left out."""
    out = []
    for line in text.splitlines():
        fields = dict(t.partition("=")[::2] for t in line.split() if "=" in t)
        name = fields.get("NodeName")
        count = sum(
            int(m) for m in re.findall(r"(?:^|,)gpu(?::[^:(,]+)?:(\d+)", fields.get("Gres", ""))
        )
        if name and count:
            out.append((name, fields.get("NodeAddr", name), count))
    return out


def node_address(text: str, node: str) -> str:
    """The ``NodeAddr`` of ``node`` in ``scontrol show node -o`` (its name when not listed):
    where the hub reaches the server a job runs on that node."""
    for line in text.splitlines():
        fields = dict(t.partition("=")[::2] for t in line.split() if "=" in t)
        if fields.get("NodeName") == node:
            return fields.get("NodeAddr") or node
    return node


def held_gpus(job: SlurmJob) -> tuple[str, ...]:
    """The ledger names of the GPUs Slurm gave ``job`` (:func:`gpu_id`), node by node."""
    return tuple(gpu_id(node, i) for node, indices in sorted(job.gpus.items()) for i in indices)


def describe_end(job: SlurmJob) -> str:
    """Why a job ended, for the student, in Slurm's words: ``"Slurm ended job 12: it reached
    its time limit (TIMEOUT, reason TimeLimit)"``."""
    what = _ENDINGS.get(job.state, f"it ended in state {job.state}")
    detail = job.state if job.reason in ("", "None") else f"{job.state}, reason {job.reason}"
    if job.state in ("FAILED", "COMPLETED") and job.exit_code not in ("", "0:0"):
        detail += f", exit code {job.exit_code}"
    return f"Slurm ended job {job.job_id}: {what} ({detail})"


def sbatch_directives(
    gpus: int,
    partition: str = "",
    qos: str = "",
    time_limit: str = "",
    account: str = "",
    extra: Iterable[str] = (),
    *,
    memory: int | None = None,
    cpus: float | None = None,
) -> list[str]:
    """The ``sbatch`` options of one server's job: ``--no-requeue`` (always: a job Slurm
    requeued after a node failure or a preemption would be pending again, and the hub would
    take it for the running server; it ends with ``NODE_FAIL`` or ``PREEMPTED`` instead, which
    the student is told), ``--gres=gpu:N`` for a GPU request, ``--mem=<MiB>M`` for a memory
    limit of ``memory`` bytes (rounded up to whole MiB) and ``--cpus-per-task=N`` for ``cpus``
    CPUs (rounded up: Slurm gives whole CPUs), then the profile's partition, QOS, time limit
    and account (each left out when empty), then ``extra`` as given. Slurm enforces memory and
    devices only where its cgroup plugins do (``TaskPlugin=task/cgroup``,
    ``ConstrainRAMSpace``, ``ConstrainDevices``: :func:`cgroup_problems`).

    Raises
    ------
    ValueError
        A negative GPU count, a memory or CPU limit not above 0, or an option value holding
        white space or a newline (it would break the batch script).
    """
    if gpus < 0:
        raise ValueError(f"a job cannot ask for {gpus} GPUs")
    options = ["--no-requeue"] + ([f"--gres=gpu:{gpus}"] if gpus else [])
    if memory is not None:
        if memory <= 0:
            raise ValueError(f"a job cannot be limited to {memory} bytes of memory")
        options.append(f"--mem={-(-memory // MIB)}M")
    if cpus is not None:
        if cpus <= 0:
            raise ValueError(f"a job cannot be limited to {cpus} CPUs")
        options.append(f"--cpus-per-task={math.ceil(cpus)}")
    for flag, value in (
        ("partition", partition),
        ("qos", qos),
        ("time", time_limit),
        ("account", account),
    ):
        if value:
            if re.search(r"\s", value):
                raise ValueError(f"Slurm {flag} {value!r} holds white space")
            options.append(f"--{flag}={value}")
    for option in extra:
        if "\n" in option:
            raise ValueError(f"sbatch option {option!r} holds a newline")
        options.append(option)
    return options


def format_start(start: dt.datetime | None, now: dt.datetime) -> str:
    """Slurm's estimated start in words: ``"at 10:20 (in about 9 min)"``, ``"not estimated
    yet"``."""
    if start is None:
        return "not estimated yet"
    minutes = max(0, round((start - now).total_seconds() / 60))
    when = start.strftime("%H:%M")
    if minutes < 1:
        return f"at {when} (under a minute)"
    if minutes < 120:
        return f"at {when} (in about {minutes} min)"
    return f"at {start:%Y-%m-%d %H:%M} (in about {minutes / 60:.1f} h)"


def submission_problem(
    exec_prefix: str,
    args: Iterable[str],
    *,
    hub_is_root: bool,
    found: Iterable[str],
    where: str = "c.ScaleLabSlurmSpawner",
) -> str | None:
    """What stops the hub from submitting students' jobs as configured, or None (pure).

    ``exec_prefix`` is batchspawner's (``sudo -E -u {username}`` by default); ``args`` the
    servers' arguments; ``found`` the commands found on the hub's ``PATH`` (of the prefix's
    first word); ``where`` the settings' section, for the message. Each problem made every
    student's start fail with HTTP 500: the prefix's command (sudo) not installed; or no prefix
    on a root hub, so that every job and server is root's, and Jupyter Server refuses to run as
    root without ``--allow-root``.
    """
    words = exec_prefix.split()
    if words and words[0] not in set(found):
        return (
            f"{where}.exec_prefix = {exec_prefix!r} runs {words[0]!r}, which is not "
            "installed on the hub's host: install it and let the hub's user run Slurm's "
            "commands as each student (a sudoers rule, see docs/operators-guide.md, Slurm), or "
            "set exec_prefix = '' to submit every job as the hub's own user"
        )
    if not words and hub_is_root and "--allow-root" not in set(args):
        return (
            f"{where}.exec_prefix = '' on a hub run as root submits every job as root, and "
            "Jupyter Server refuses to run as root: keep exec_prefix = 'sudo -E -u {username}' "
            f"with a cluster account per student (recommended), or add '--allow-root' to "
            f"{where}.args to run every server as root knowingly"
        )
    return None


def parse_show_config(text: str) -> dict[str, str]:
    """``scontrol show config``'s ``Key = Value`` lines as a dict (its cgroup.conf section
    included, as Slurm 22.05 prints it); lines without `` = `` are skipped."""
    config: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.strip():
            config[key.strip()] = value.strip()
    return config


def cgroup_problems(config: Mapping[str, str], *, gpus: bool, memory: bool) -> list[str]:
    """What Slurm's configuration (:func:`parse_show_config`) leaves unconfined for the course's
    jobs, one sentence each with its setting (pure; empty: nothing).

    Parameters
    ----------
    config
        ``scontrol show config`` as a dict.
    gpus
        Whether some profile asks for GPUs: each job must see only its own
        (``ConstrainDevices``).
    memory
        Whether the servers have memory limits (``mem_limit``, a profile's): Slurm must give
        memory as a resource (``SelectTypeParameters`` ``CR_*_Memory``) and hold a job to it
        (``ConstrainRAMSpace``).

    Source: Slurm's cgroup.conf and slurm.conf manual pages (22.05).
    """

    def yes(key: str) -> bool:
        return config.get(key, "").lower() == "yes"

    problems = []
    task_cgroup = "task/cgroup" in config.get("TaskPlugin", "")
    if not task_cgroup:
        problems.append(
            "TaskPlugin has no task/cgroup, so no job is held to its memory or devices "
            "(slurm.conf: TaskPlugin=task/cgroup,task/affinity)"
        )
    if config.get("ProctrackType", "") != "proctrack/cgroup":
        problems.append(
            "ProctrackType is not proctrack/cgroup, so a process a kernel starts in a new "
            "session can outlive its job (slurm.conf: ProctrackType=proctrack/cgroup)"
        )
    if gpus and task_cgroup and not yes("ConstrainDevices"):
        problems.append(
            "ConstrainDevices is off, so a job sees every GPU of its node (cgroup.conf: "
            "ConstrainDevices=yes)"
        )
    if memory:
        if "MEMORY" not in config.get("SelectTypeParameters", "").upper():
            problems.append(
                "memory is not a consumable resource, so --mem reserves nothing "
                "(slurm.conf: SelectTypeParameters=CR_Core_Memory)"
            )
        if task_cgroup and not yes("ConstrainRAMSpace"):
            problems.append(
                "ConstrainRAMSpace is off, so a job may use more memory than its --mem "
                "(cgroup.conf: ConstrainRAMSpace=yes)"
            )
    return problems
