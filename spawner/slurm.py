"""``ScaleLabSlurmSpawner``: course servers as Slurm jobs (over batchspawner's ``SlurmSpawner``).

GPU profiles become ``--gres=gpu:N`` requests, ScaleLab's limits are checked before anything is
submitted, the pending page shows Slurm's queue, a job's end is told in Slurm's words, Slurm's
GPUs go into the ledger (:class:`SlurmGPUs`) and Stop cancels the job. Slurm's commands run on
the hub's host. Why: docs/design-notes.md, scalelab.spawner.slurm.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from batchspawner import JobStatus, SlurmSpawner
from traitlets import Dict, Float, Unicode, default, observe, validate

from scalelab.common.gpu_inventory import GPU, GPUInventory
from scalelab.common.gpu_source import ServerReports
from scalelab.spawner import start_watch
from scalelab.spawner.course import CourseSpawnerMixin
from scalelab.spawner.ledger import Holding, LedgerError
from scalelab.spawner.slurm_jobs import (
    PENDING_FORMAT,
    SACCT_FIELDS,
    QueuePlace,
    SlurmJob,
    describe_end,
    explain_reason,
    format_start,
    gpu_id,
    held_gpus,
    node_address,
    node_gpus,
    parse_job,
    parse_sacct,
    queue_place,
    sbatch_directives,
    submission_problem,
)

T = TypeVar("T")

#: Keys of one entry of ``slurm_profiles``.
PROFILE_KEYS = frozenset({"partition", "qos", "time", "account", "options"})

#: Seconds between two tries to connect to a started server's port before the spawner hands
#: it to the hub (see :meth:`ScaleLabSlurmSpawner.wait_listening`).
LISTEN_CHECK_S = 0.05


class SlurmGPUs(ServerReports):
    """The GPUs of a Slurm cluster: every node's ``Gres=gpu:N`` (``scontrol show node -o``),
    named ``"<node>/gpu<index>"``. The default GPU source of :class:`ScaleLabSlurmSpawner`.

    Their readings are those the servers holding them report from their nodes (NVML there,
    :mod:`scalelab.hub_ext.server.gpu_report`, which names them as here from the job's
    ``SLURMD_NODENAME`` and ``SLURM_JOB_GPUS``), kept as :class:`ServerReports` keeps them; a GPU
    no server has reported on for ``max_age_s`` seconds is unknown (never idle)."""

    scontrol = Unicode(
        "scontrol",
        config=True,
        help="The `scontrol` command (a path, when it is not on the hub's PATH).",
    )

    def discover(self) -> GPUInventory:
        """Ask Slurm for its nodes' GPUs (blocking).

        Returns
        -------
        GPUInventory
            Source ``"slurm"``; empty with the reason when Slurm cannot be asked.
        """
        try:
            out = subprocess.run(
                [self.scontrol, "show", "node", "-o"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return GPUInventory((), "none", f"scontrol show node: {exc}")
        if out.returncode != 0:
            return GPUInventory((), "none", f"scontrol show node: {out.stderr.strip()}")
        gpus = [
            GPU(index=i, uuid=gpu_id(node, i), name=f"Slurm GRES gpu {i} of {node}", memory_mib=0)
            for node, _, count in node_gpus(out.stdout)
            for i in range(count)
        ]
        return GPUInventory(tuple(gpus), "slurm", "" if gpus else "no node has Gres=gpu")


#: The batch script's lines that give the server a Jupyter runtime folder of the job's own on
#: its node (``mktemp -d``: 0700, the student's), for the kernels' ``ipc`` sockets: a short
#: path on a local file system, not the home on the cluster's shared one; and, inside it, the
#: job's temporary folder (``TMPDIR``, ``SPARK_LOCAL_DIRS``; the Spark driver's
#: ``java.io.tmpdir`` follows ``TMPDIR``), so that a library's per-user cache under
#: ``tempfile.gettempdir()`` (``torchinductor_<user>``...) cannot be planted in advance by
#: another user of the node's /tmp. ``srun`` passes only the variables of ``SLURM_EXPORT_ENV``
#: (sbatch's ``--export``) to the server's step: these are added there. Removed when the job
#: script exits; a job killed outright leaves the folder (the student's, 0700) in the node's
#: /tmp (Slurm's ``job_container/tmpfs`` gives each job a /tmp that goes with it).
RUNTIME_ON_NODE = (
    'export JUPYTER_RUNTIME_DIR="$(mktemp -d "${TMPDIR:-/tmp}/scalelab-runtime-XXXXXX")"\n'
    "trap 'rm -rf \"$JUPYTER_RUNTIME_DIR\"' EXIT\n"
    'mkdir -m 0700 "$JUPYTER_RUNTIME_DIR/tmp"\n'
    'export TMPDIR="$JUPYTER_RUNTIME_DIR/tmp" SPARK_LOCAL_DIRS="$JUPYTER_RUNTIME_DIR/tmp"\n'
    'export SLURM_EXPORT_ENV="${SLURM_EXPORT_ENV:-ALL},JUPYTER_RUNTIME_DIR,TMPDIR,'
    'SPARK_LOCAL_DIRS"\n'
)


def insert_directives(script: str, options: list[str]) -> str:
    """``script`` with ``#SBATCH <option>`` lines after its first line (the ``#!`` line), where
    ``sbatch`` reads them (pure)."""
    first, _, rest = script.partition("\n")
    lines = "".join(f"#SBATCH {option}\n" for option in options)
    return f"{first}\n{lines}{rest}"


class ScaleLabSlurmSpawner(CourseSpawnerMixin, SlurmSpawner):
    """ScaleLab's course servers as Slurm jobs (see the module): set as
    ``c.JupyterHub.spawner_class = "scalelab.spawner.slurm.ScaleLabSlurmSpawner"``, its settings
    (course and batchspawner's) as ``c.ScaleLabSlurmSpawner.*``."""

    slurm_profiles = Dict(
        key_trait=Unicode(),
        value_trait=Dict(),
        config=True,
        help="""Slurm's side of each spawn profile, by profile slug: {"gpu-1": {"partition":
        "gpu", "qos": "course", "time": "4:00:00", "account": "dl-course", "options":
        ["--constraint=h100"]}}. Each key is optional and wins over `slurm_partition`,
        `slurm_qos`, `slurm_time_limit` and `slurm_account`; `options` are further sbatch
        options, as written on an `#SBATCH` line. The GPU count is the profile's: `--gres=gpu:N`.
        Default: none (the cluster-wide settings for every profile).""",
    )
    slurm_partition = Unicode(
        "",
        config=True,
        help="Slurm partition of every server's job (`--partition`), unless its profile's entry "
        "in `slurm_profiles` names one. Empty: the cluster's default partition.",
    )
    slurm_qos = Unicode(
        "",
        config=True,
        help="Slurm QOS of every server's job (`--qos`), unless its profile names one. Empty: "
        "the account's default QOS.",
    )
    slurm_time_limit = Unicode(
        "",
        config=True,
        help="Time limit of every server's job (`--time`, e.g. `8:00:00`), unless its profile "
        "names one; Slurm's estimated start needs time limits. Empty: the partition's default.",
    )
    slurm_account = Unicode(
        "",
        config=True,
        help="Slurm account charged for every server's job (`--account`), unless its profile "
        "names one. Empty: the student's default account.",
    )
    slurm_queue_poll_interval = Float(
        2.0,
        min=0.5,
        config=True,
        help="Seconds between two looks at Slurm's queue (`squeue --start`) while a student's "
        "job is pending, for the place and estimated start on the pending page.",
    )
    home_root = Unicode(
        "",
        config=True,
        help="""Folder of the students' homes on the cluster's shared file system,
        `<home_root>/<username>` (made by the hub when missing): the job's working folder and
        the place of its log, `jupyterhub_slurmspawner_<job id>.log`. Empty: each student's
        system home (`pwd`), as batchspawner does.""",
    )

    #: The job as Slurm last showed it running (node, GPUs), or None.
    _job: SlurmJob | None = None
    #: Set when batchspawner's API gives the server's port (``_port_changed``); None outside start.
    _port_known: asyncio.Event | None = None
    #: Why the last job ended, in Slurm's words, or None.
    _ended: SlurmJob | None = None
    _node_addr: str = ""

    @classmethod
    def check_host_settings(cls, settings: dict[str, Any], where: str) -> None:
        """Check, before the hub starts, that jobs can be submitted as configured
        (:func:`~scalelab.spawner.slurm_jobs.submission_problem`).

        Raises
        ------
        ValueError
            They cannot; the message names the setting and the fix.
        """
        exec_prefix = settings.get("exec_prefix", cls.class_traits()["exec_prefix"].default_value)
        first = str(exec_prefix).split()[:1]
        problem = submission_problem(
            str(exec_prefix),
            settings.get("args") or [],
            hub_is_root=os.geteuid() == 0,
            found=[w for w in first if shutil.which(w)],
            where=where,
        )
        if problem:
            raise ValueError(problem)

    @validate("slurm_profiles")
    def _check_profiles(self, proposal):
        for slug, entry in proposal["value"].items():
            unknown = set(entry) - PROFILE_KEYS
            if unknown:
                raise ValueError(
                    f"slurm_profiles[{slug!r}] has unknown key(s) {sorted(unknown)}: use "
                    f"{sorted(PROFILE_KEYS)}"
                )
            options = entry.get("options", [])
            if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
                raise ValueError(f"slurm_profiles[{slug!r}]['options'] must be a list of strings")
        return proposal["value"]

    @default("gpu_source_class")
    def _default_gpu_source(self):
        return SlurmGPUs

    @default("cmd")
    def _default_cmd(self) -> list[str]:
        # The hub's environment's server; the cluster's nodes see it on the shared file system.
        return [str(Path(sys.executable).with_name("jupyterhub-singleuser"))]

    @default("batchspawner_singleuser_cmd")
    def _default_singleuser_cmd(self) -> str:
        return str(Path(sys.executable).with_name("batchspawner-singleuser"))

    @default("req_homedir")
    def _default_homedir(self) -> str:
        if self.home_root:
            return str(Path(self.home_root) / self.user.name)
        return pwd.getpwnam(self.user.name).pw_dir

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        """USER, HOME (``req_homedir``) and SHELL (the system user's, when there is one)."""
        env["USER"] = self.user.name
        env["HOME"] = self.req_homedir
        try:
            env["SHELL"] = pwd.getpwnam(self.user.name).pw_shell
        except KeyError:
            pass
        return env

    # -- the job's request -----------------------------------------------------------------------

    def job_directives(self) -> list[str]:
        """The sbatch options of this start's profile (:func:`sbatch_directives`), with its
        ``mem_limit`` and ``cpu_limit`` (the profile's, else the spawner's) as ``--mem`` and
        ``--cpus-per-task``.

        Raises
        ------
        ValueError
            An option value with white space in it.
        """
        request = self._request
        gpus = request.gpus if request else 0
        entry = self.slurm_profiles.get(request.profile.slug, {}) if request else {}
        return sbatch_directives(
            gpus,
            partition=entry.get("partition", self.slurm_partition),
            qos=entry.get("qos", self.slurm_qos),
            time_limit=entry.get("time", self.slurm_time_limit),
            account=entry.get("account", self.slurm_account),
            extra=entry.get("options", ()),
            memory=self.mem_limit or None,
            cpus=self.cpu_limit or None,
        )

    async def _get_batch_script(self, **subvars):
        prologue = RUNTIME_ON_NODE + subvars.get("prologue", "")
        if not self.requested_gpus:
            # Slurm leaves CUDA_VISIBLE_DEVICES unset in a job without GPUs (sbatch drops the
            # empty value it was given): the server would see every GPU of its node that the
            # node's cgroups (ConstrainDevices) do not hide. Hide them in the script.
            prologue = "export CUDA_VISIBLE_DEVICES=''\n" + prologue
        subvars["prologue"] = prologue
        script = await super()._get_batch_script(**subvars)
        return insert_directives(script, self.job_directives())

    def has_gpus_to_report(self) -> bool:
        """Whether this job asks for GPUs: Slurm picks them after submission, so the server
        names them itself (``SLURMD_NODENAME``, ``SLURM_JOB_GPUS``) in its reports."""
        return bool(self.requested_gpus)

    def get_env(self) -> dict[str, str]:
        """The course's environment, without the GPU variables of a GPU request: Slurm sets the
        job's ``CUDA_VISIBLE_DEVICES`` to the GPUs it gives (a CPU-only job keeps ``""``, which
        hides every GPU)."""
        env = super().get_env()
        if self.requested_gpus:
            for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "SCALELAB_GPUS"):
                env.pop(name, None)
        return env

    # -- Slurm's commands --------------------------------------------------------------------------

    async def _slurm(self, *argv: str) -> tuple[int, str]:
        """Run a Slurm client command on the hub; (exit status, stdout or else stderr)."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
        except (OSError, TimeoutError) as exc:
            return 1, str(exc)
        if proc.returncode != 0:
            return proc.returncode or 1, (err or out).decode(errors="replace").strip()
        return 0, out.decode(errors="replace")

    async def show_job(self, job_id: str) -> SlurmJob | None:
        """``scontrol show job -d -o`` read, or None when Slurm no longer knows the job."""
        rc, out = await self._slurm("scontrol", "show", "job", "-d", "-o", job_id)
        if rc != 0:
            return None
        try:
            return parse_job(out)
        except ValueError:
            return None

    async def job_end(self, job_id: str) -> SlurmJob | None:
        """How job ``job_id`` ended: ``sacct``'s state and reason, or ``scontrol``'s on a
        cluster without accounting; None when neither knows."""
        rc, out = await self._slurm("sacct", "-n", "-P", "-X", "-o", SACCT_FIELDS, "-j", job_id)
        ended = parse_sacct(out, job_id) if rc == 0 else None
        if ended is not None and ended.state not in ("RUNNING", "PENDING"):
            return ended
        return await self.show_job(job_id)

    async def queue_place(self) -> QueuePlace | None:
        """This job's place among the pending jobs of its partition (``squeue --start``)."""
        job = self.job_id
        if not job:
            return None
        partition = await self._partition()
        where = ["-p", partition] if partition else []
        rc, out = await self._slurm(
            "squeue", "-h", "-t", "PENDING", *where, "--start", "-o", PENDING_FORMAT
        )
        return queue_place(out, job) if rc == 0 else None

    async def _partition(self) -> str:
        rc, out = await self._slurm("squeue", "-h", "-j", self.job_id, "-o", "%P")
        return out.strip() if rc == 0 else ""

    # -- batchspawner's job status, with the GPUs and the reason -------------------------------

    async def query_job_status(self):
        """batchspawner's job status, with the running job's node and GPUs (into the ledger)
        and, when the job is gone, how it ended (``sacct``).

        Raises
        ------
        asyncio.CancelledError
            The task was cancelled (the student stopped a pending start) while ``squeue`` ran:
            batchspawner's ``run_command`` catches the cancellation and kills ``squeue``, whose
            failure would read as a job gone; the start ends here instead, keeping the job id
            for Stop's ``scancel``.
        """
        job_id = self.job_id
        status = await super().query_job_status()
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
        if status == JobStatus.RUNNING and self._job is None:
            job = await self.show_job(job_id)
            if job is not None and job.batch_host:
                self._job = job
                rc, out = await self._slurm("scontrol", "show", "node", "-o", job.batch_host)
                self._node_addr = node_address(out, job.batch_host) if rc == 0 else ""
                await self._hold(job)
        elif status == JobStatus.NOTFOUND and job_id:
            self._ended = await self.job_end(job_id)
        return status

    def state_gethost(self) -> str:
        """Where the hub reaches the server: the ``NodeAddr`` of the job's node."""
        return self._node_addr or super().state_gethost()

    async def _hold(self, job: SlurmJob) -> None:
        """Put the GPUs Slurm gave ``job`` into the ledger, under this server, as Slurm records
        them (``scontrol show job -d``'s GRES detail): a server the ledger still has on one of
        them lost it, its job having ended in Slurm before the hub's poll found out."""
        allocator = await self.gpu_allocator()
        holding = Holding(self.server_key, self.user.name, held_gpus(job), time.time())
        try:
            taken = await allocator.take_over(holding)
        except LedgerError as exc:
            self.log.error("Slurm job %s: %s", job.job_id, exc)
            taken = {}
        for other, gpus in taken.items():
            self.log.warning(
                "Slurm gave GPU(s) %s to job %s of %s: %s's job no longer holds them (it ended "
                "before the hub's poll found out)",
                ", ".join(gpus),
                job.job_id,
                self.server_key,
                other,
            )
        self._holding = holding
        if holding.gpus:
            self.log.info(
                "%s: Slurm job %s holds GPU(s) %s",
                self.server_key,
                job.job_id,
                ", ".join(holding.gpus),
            )

    # -- the course layer's steps, for Slurm ---------------------------------------------------

    async def allocate_gpus(self) -> Holding:
        """No queue of ScaleLab's: the caps were checked when the student asked
        (``apply_user_options``); Slurm queues and picks the GPUs."""
        if self._request is None:  # apply_user_options was overridden by ops: validate here
            await self.apply_scalelab_options(self.user_options)
        self._holding = Holding(self.server_key, self.user.name, (), time.time())
        return self._holding

    async def start(self):
        self._job = None
        self._ended = None
        self._node_addr = ""
        self._make_home()
        try:
            return await self._start_job()
        except RuntimeError as exc:
            if self._ended is None:
                raise
            message = f"Your server's job ended before it started: {describe_end(self._ended)}."
            raise start_watch.spawn_failure(
                message, reason="slurm_job_ended", log_message=f"{self.server_key}: {exc}"
            ) from None

    def _make_home(self) -> None:
        """Make the student's home under ``home_root`` when jobs run as the hub's own user; with
        an ``exec_prefix`` (jobs as the student's account) only check that it is there: one the
        hub made would be its user's, where the student's job cannot write its log.

        Raises
        ------
        SpawnException
            The student's home under ``home_root`` is missing and jobs run as the student.
        """
        if not self.home_root:
            return
        home = Path(self.req_homedir)
        if not self.exec_prefix.split():
            home.mkdir(parents=True, exist_ok=True)
            return
        if home.is_dir():
            return
        raise start_watch.spawn_failure(
            f"Your home folder {home} does not exist on the cluster, and your server's job runs "
            "as your own cluster account, which needs it. Ask the course's operators to make it.",
            reason="slurm_no_home",
            log_message=(
                f"{self.server_key}: {home} is missing. With c.ScaleLabSlurmSpawner.exec_prefix = "
                f"{self.exec_prefix!r} jobs run as the student's account, whose home the "
                "cluster provides: make it, owned by that account, or set home_root = '' for the "
                "accounts' own homes"
            ),
        )

    async def _start_job(self) -> tuple[str, int]:
        """batchspawner's ``start`` (submit, poll the job every ``startup_poll_interval`` seconds
        until Slurm runs it), then: the port as soon as the server posts it (not at the next
        poll), and the server's address once it accepts connections (:meth:`wait_listening`).

        Returns
        -------
        tuple
            (address, port) of the server, for the hub.

        Raises
        ------
        RuntimeError
            No job id from ``sbatch``, or the job left Slurm's queue before it ran (as
            batchspawner; :meth:`start` tells Slurm's reason).
        """
        self.ip = self.traits()["ip"].default_value
        self.port = self.traits()["port"].default_value
        if self.server:
            self.server.port = self.port
        self._port_known = asyncio.Event()
        submitted = time.monotonic()
        await self.submit_batch_script()
        if not self.job_id:
            raise RuntimeError("Jupyter batch job submission failure (no jobid in output)")
        while True:
            status = await self.query_job_status()
            if status == JobStatus.RUNNING:
                break
            if status not in (JobStatus.PENDING, JobStatus.UNKNOWN):
                self.log.warning(
                    "Job %s neither pending nor running.\n%s", self.job_id, self.job_status
                )
                self.clear_state()
                raise RuntimeError(
                    "The Jupyter batch job has disappeared while pending in the queue or died "
                    "immediately after starting."
                )
            await asyncio.sleep(self.startup_poll_interval)
        running = time.monotonic() - submitted
        self.ip = self.state_gethost()
        # batchspawner-singleuser posts the port (POST /hub/api/batchspawner) before it starts
        # the server; the hub's start_timeout bounds this wait, as batchspawner's own.
        await self._while_running(self._port_known.wait())
        posted = time.monotonic() - submitted
        listening = await self._while_running(
            self.wait_listening(self.ip or "127.0.0.1", self.port)
        )
        self.log.info(
            "Notebook server job %s started at %s:%s (seconds after sbatch: running %.2f, port "
            "posted %.2f, %s %.2f)",
            self.job_id,
            self.ip,
            self.port,
            running,
            posted,
            "listening" if listening else "not listening yet",
            time.monotonic() - submitted,
        )
        return self.ip, self.port

    async def _while_running(self, wait: Awaitable[T]) -> T:
        """``wait``'s result, looking at the job every ``startup_poll_interval`` seconds
        meanwhile: a server that fails after its job started (a crash at import, a store it
        cannot open) ends the wait at once, not after the hub's timeout.

        Raises
        ------
        RuntimeError
            The job left Slurm's queue first (:meth:`query_job_status` has read why, which
            :meth:`start` tells).
        """
        waiting = asyncio.ensure_future(wait)
        try:
            while True:
                done, _ = await asyncio.wait({waiting}, timeout=self.startup_poll_interval)
                if done:
                    return waiting.result()
                status = await self.query_job_status()
                if status not in (JobStatus.RUNNING, JobStatus.UNKNOWN):
                    raise RuntimeError(f"job {self.job_id} ended before its server listened")
        finally:
            waiting.cancel()

    @observe("port")
    def _port_changed(self, change) -> None:
        if change["new"] and self._port_known is not None:
            self._port_known.set()

    async def wait_listening(self, host: str, port: int) -> bool:
        """Wait until ``host:port`` accepts a TCP connection, trying every ``LISTEN_CHECK_S``
        seconds, at most ``http_timeout`` seconds.

        The port is known when ``batchspawner-singleuser`` posts it, before the server has
        imported Jupyter Server (1-2 s); the hub's own check (``http_timeout``) then waits with
        an exponential back-off of up to 5 s between tries (JupyterHub's
        ``exponential_backoff``), so a server up a moment after a try waits for the next one.
        Handing the server over once it listens, the hub's first try finds it.

        Returns
        -------
        bool
            Whether it listens; False after ``http_timeout`` seconds (the hub's check then tells
            the student, as without this wait).
        """
        try:  # the job's process is on another node: only the port can end the wait
            await start_watch.wait_listening(
                host, port, lambda: None, self.http_timeout, interval_s=LISTEN_CHECK_S
            )
        except TimeoutError:
            return False
        return True

    async def cancel_batch_job(self):
        if self.job_id:  # nothing submitted yet: nothing to cancel
            await super().cancel_batch_job()

    async def poll(self):
        status = await super().poll()
        if status is not None and self._ended is not None and self.pending != "stop":
            self._exit_notes.setdefault(
                self.server_key,
                f"Your previous server stopped: {describe_end(self._ended)}. "
                "Files in your home are kept.",
            )
        return status

    def _how_it_ended(self, status: int) -> str:
        if self._ended is not None:
            return describe_end(self._ended)
        return super()._how_it_ended(status)

    # -- the pending page ------------------------------------------------------------------------

    async def progress(self):
        """Slurm's place in the queue and estimated start while the job is pending (an event
        each time they or Slurm's reason change, looked at every
        ``slurm_queue_poll_interval`` seconds); then the node and GPUs Slurm gave."""
        note = self._exit_notes.get(self.server_key)
        if note:
            yield {"progress": 0, "message": note}
        announced = False
        shown = ""
        while self.pending == "spawn":
            if self._job is not None:
                if not announced:
                    announced = True
                    gpus = ", ".join(self._holding.gpus) if self._holding else ""
                    yield {
                        "progress": 50,
                        "message": (
                            f"Slurm started job {self._job.job_id} on {self._job.batch_host}"
                            f" ({gpus or 'CPU only'}); starting your server."
                        ),
                        "slurm": self.slurm_summary(),
                    }
            elif self.job_id:
                place = await self.queue_place()
                if place is not None:
                    event = self._queue_event(place)
                    if event["message"] != shown:  # a new place, estimate or reason
                        shown = event["message"]
                        yield event
            await asyncio.sleep(self.slurm_queue_poll_interval)

    def _queue_event(self, place: QueuePlace) -> dict[str, Any]:
        """The progress event of a pending job: ``message`` (plain text), ``html_message`` (what
        JupyterHub's pending page shows: place, estimated start, Slurm's reason, one a line),
        ``scalelab_queue`` (``position``, ``length``, ``wait_s`` in seconds or None) and
        ``slurm`` (``job_id``, ``position``, ``length``, ``estimated_start`` in ISO 8601 local
        time of the controller or None, ``reason``)."""
        now = dt.datetime.now()  # Slurm's times are the controller's local time
        wait_s = None if place.start is None else max(0, (place.start - now).total_seconds())
        start = format_start(place.start, now)
        why = explain_reason(place.reason)
        return {
            "progress": 10,
            "message": (
                f"Waiting in Slurm's queue (job {self.job_id}): you are number {place.position} "
                f"of {place.length}, estimated start {start} (Slurm: {place.reason}). "
                "Stop Server cancels the job."
            ),
            "html_message": (
                '<span class="scalelab-slurm-queue">'
                f"Waiting in Slurm's queue: you are <strong>number {place.position} of "
                f"{place.length}</strong>.<br>Slurm's estimated start: <strong>"
                f"{html.escape(start)}</strong>.<br>"
                f"Job {html.escape(self.job_id)} waits for: {html.escape(place.reason)}"
                f"{html.escape(f' ({why})') if why else ''}.<br>"
                "<strong>Stop Server</strong> cancels the job.</span>"
            ),
            "scalelab_queue": {
                "position": place.position,
                "length": place.length,
                "wait_s": None if wait_s is None else round(wait_s),
            },
            "slurm": {
                "job_id": self.job_id,
                "position": place.position,
                "length": place.length,
                "estimated_start": None if place.start is None else place.start.isoformat(),
                "reason": place.reason,
            },
        }

    def slurm_summary(self) -> dict[str, Any]:
        """``{"job_id", "node", "gpus": [GRES indices]}`` of the running job (empty before)."""
        if self._job is None:
            return {}
        node = self._job.batch_host
        return {
            "job_id": self._job.job_id,
            "node": node,
            "gpus": list(self._job.gpus.get(node, ())),
        }

    # -- state -----------------------------------------------------------------------------------

    def get_state(self):
        state = super().get_state()
        if self._job is not None:
            state["slurm"] = {**self.slurm_summary(), "address": self._node_addr}
        return state

    def load_state(self, state):
        super().load_state(state)
        saved = state.get("slurm")
        if saved and saved.get("job_id") == self.job_id:
            node = saved.get("node", "")
            self._job = SlurmJob(
                job_id=saved["job_id"],
                state="RUNNING",
                batch_host=node,
                gpus={node: tuple(saved.get("gpus", ()))} if node else {},
            )
            self._node_addr = saved.get("address", "")

    def clear_state(self):
        super().clear_state()
        self._job = None
        self._node_addr = ""
