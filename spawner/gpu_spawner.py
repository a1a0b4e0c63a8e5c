"""GPUs of a course server: profiles, validated ``user_options``, allocation and queue.

:class:`GPUSpawnerMixin`, the GPU part of :class:`~scalelab.spawner.course.CourseSpawnerMixin`:
``apply_user_options`` validates, ``start`` waits in the hub's GPU queue then launches,
``progress`` reports place and wait; GPUs go back on stop, death, a failed start and cancel.
Why: docs/design-notes.md, scalelab.spawner.gpu_spawner.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import sqlalchemy
from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PrefixLoader, select_autoescape
from jupyterhub.spawner import Spawner
from tornado import web
from traitlets import Dict, Float, List, Type, Unicode, default
from traitlets.config import Config

from scalelab import envvars
from scalelab.common.classsetting import configured_class
from scalelab.common.gpu_inventory import declared_inventory
from scalelab.common.gpu_source import DeclaredGPUs, GPUSource, source_class
from scalelab.kernels.spark_defaults import DEFAULT_DRIVER_MEMORY_CHOICES
from scalelab.spawner.allocator import GPUAllocator, RequestWithdrawn
from scalelab.spawner.gpu_pool import PLACEHOLDER_GRACE_S, GPUPool
from scalelab.spawner.ledger import Holding
from scalelab.spawner.metrics import QUEUE_WAIT, record_gpu_hours
from scalelab.spawner.policy import GPUPolicy, PolicyError
from scalelab.spawner.profiles import (
    OptionsError,
    Profile,
    ProfileForbidden,
    SpawnRequest,
    check_memory_choices,
    check_profile_access,
    default_profile,
    options_from_form,
    parse_user_options,
    profiles_from_config,
)
from scalelab.spawner.queue import DEFAULT_FAIR_SHARE_S_PER_GPU_HOUR
from scalelab.spawner.refusals import OptionsRefused, refuse
from scalelab.spawner.spark_grants import SparkGrant
from scalelab.spawner.start_queue import StartQueueMixin, StartQueueTimeout
from scalelab.spawner.start_watch import describe_exit, spawn_failure
from scalelab.templates import templates_dir

#: Version of the ``scalelab`` section in the spawner state.
STATE_VERSION = 1
#: ``gpu_queue_timeout`` of 0 means this long: a queued request waits until cancelled.
_NO_QUEUE_LIMIT_S = 30 * 24 * 3600.0

DEFAULT_PROFILES = [
    {
        "slug": "cpu",
        "display_name": "CPU only",
        "description": "PySpark and small models",
        "default": True,
    },
    {"slug": "gpu-1", "display_name": "1 GPU", "gpus": 1, "description": "Training on one GPU"},
    {"slug": "gpu-2", "display_name": "2 GPUs", "gpus": 2, "description": "Multi-GPU training"},
]


def _imported_source(value: Any, where: str) -> type[GPUSource] | None:
    """The GPU source class a ``gpu_source_class`` setting names (a class or an import path),
    or None when unset."""
    return configured_class(value, GPUSource, where)


def check_spawn_settings(config: Config, settings: Mapping[str, Any], where: str) -> None:
    """Check the spawn settings' values: ``c.GPUPolicy``, the profiles, the Spark driver memory
    sizes, the declared GPUs, and the GPU source class with its own section.

    Parameters
    ----------
    config
        The hub configuration.
    settings
        The spawner's settings, its class's sections merged (a subclass's wins).
    where
        How the spawner's section is written, for messages: ``"c.ScaleLabSpawner"``.

    Raises
    ------
    traitlets.TraitError, ValueError
        A misspelt ``GPUPolicy`` or GPU source setting, a bad value, profile, memory size,
        declared GPU or GPU source class; the message names it.
    """
    GPUPolicy(config=config)
    profiles_from_config(settings.get("profiles", DEFAULT_PROFILES))
    check_memory_choices(
        settings.get("spark_driver_memory_choices", list(DEFAULT_DRIVER_MEMORY_CHOICES))
    )
    if settings.get("declared_gpus"):
        declared_inventory(settings["declared_gpus"])
    chosen = _imported_source(settings.get("gpu_source_class"), f"{where}.gpu_source_class")
    source_class(chosen, bool(settings.get("declared_gpus")))(config=config)  # its c.<Source>


def format_wait(seconds: float) -> str:
    """``"about 25 min"``, ``"under a minute"``, ``"unknown"``."""
    if math.isinf(seconds):
        return "unknown"
    if seconds < 60:
        return "under a minute"
    if seconds < 3600:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"


class GPUSpawnerMixin(StartQueueMixin, Spawner):
    """GPU profiles, allocation and queue: the GPU part of
    :class:`~scalelab.spawner.course.CourseSpawnerMixin`, which spawner classes use (it gives
    the Spark driver memory of the spawn form, :meth:`spark_memory_offer`).
    """

    profiles = List(
        Dict(),
        default_value=DEFAULT_PROFILES,
        config=True,
        help="""Profiles of the spawn form: [{"slug": "gpu-1", "display_name": "1 GPU", "gpus": 1,
        "description": "...", "default": false, "groups": ["research"], "mem_limit": "32G",
        "cpu_limit": 8}, ...]. Profiles that ask for more GPUs than the hub has are hidden.
        `groups` (optional): the JupyterHub groups whose members alone see the profile and may
        start it (others asking for it, with a tampered form or the REST API, are refused with
        403); at least one profile, the default, has no `groups`. `mem_limit` and `cpu_limit`
        (optional): the spawner's `mem_limit` ("8G", "512M" or bytes) and `cpu_limit` (CPUs)
        for a server of this profile, instead of the spawner's own (on the local
        spawner, its cgroup's limits; on Slurm, the job's `--mem` and `--cpus-per-task`; on
        Kubernetes, the pod's limits). Misspelt keys are an error.""",
    )
    declared_gpus = List(
        Dict(),
        config=True,
        help="""Declare the GPU inventory instead of asking NVML: [{"uuid": "GPU-test-0",
        "name": "declared test GPU", "memory_mib": 81920}]. For tests and hosts NVML cannot
        see; logged as DECLARED, released GPUs are not checked for leftover processes, and
        their utilisation is unknown (never idle). Read by the `DeclaredGPUs` source, the
        default `gpu_source_class` when this list is set.""",
    )
    gpu_source_class = Type(
        default_value=None,
        klass=GPUSource,
        allow_none=True,
        config=True,
        help="""Where the GPUs and their readings come from: a subclass of
        `scalelab.spawner.gpu_source.GPUSource`, or its import path.
        `scalelab.spawner.gpu_source.NVMLGPUs`: the host's GPUs through NVML;
        `scalelab.spawner.gpu_source.DeclaredGPUs`: the list in `declared_gpus`.
        None (the default): DeclaredGPUs when `declared_gpus` is set, else NVMLGPUs. The Slurm
        spawner's default is `scalelab.spawner.slurm.SlurmGPUs`: its nodes' `Gres=gpu:N`.
        The source's own settings are `c.<ClassName>.<setting>`.""",
    )
    exclude_gpus = List(
        Unicode(),
        config=True,
        help='GPUs never handed out: UUIDs, or NVML host indices as text ("0").',
    )
    gpu_queue_timeout = Float(
        0.0,
        min=0.0,
        config=True,
        help="""Seconds a GPU request may wait in the queue before the spawn fails.
        0: wait until the student cancels.""",
    )
    fair_share_s_per_gpu_hour = Float(
        DEFAULT_FAIR_SHARE_S_PER_GPU_HOUR,
        min=0.0,
        config=True,
        help="""Queue fairness: seconds a request moves back in line for every GPU-hour its user
        held in the last 7 days (default: 5 minutes). 0: plain first come, first served.""",
    )
    gpu_queue_file = Unicode(
        "scalelab-gpu-queue.json",
        config=True,
        help="""JSON file that keeps the GPU queue across hub restarts (relative paths are
        taken from the hub's working directory, like JupyterHub's SQLite database). Written
        atomically at every queue change; when the hub starts, the waiting requests go back in
        their places and are started again in their students' names. Empty: the queue lives in
        memory only and a hub restart drops it. `scalelab up` keeps it in its state folder.""",
    )
    gpu_abandon_timeout = Float(
        300.0,
        min=0.0,
        config=True,
        help="""Seconds a queued GPU request may go without anyone watching its pending page
        (the progress stream) before it is withdrawn from the queue: the student closed the tab.
        The spawn then fails with a message the student sees on their next visit, and nothing
        stays queued or held. 0: never withdrawn for that (REST clients that do not follow the
        progress stream). A request restored after a hub restart and never started again is
        withdrawn after this long too (300 s when 0).""",
    )
    gpu_report_interval = Float(
        30.0,
        min=1.0,
        config=True,
        help="""Seconds between a GPU server's reports of its own GPUs' readings (NVML, read on
        the node that holds them) to the hub, when the GPU source takes reports
        (`gpu_source_class` `scalelab.spawner.gpu_source.ReportedGPUs`: servers on other
        nodes, e.g. Kubernetes; the Slurm spawner's `SlurmGPUs` too). Keep it below the
        source's `max_age_s`.""",
    )
    options_template_paths = List(
        Unicode(),
        config=True,
        help="""Folders searched before ScaleLab's own for `spawn_options.html` (the spawn form).
        A `spawn_options.html` of ops' own replaces ScaleLab's, or adds fields to it with
        `{% extends "scalelab/spawn_options.html" %}{% block extra_fields %}<your fields>{%
        endblock %}`; the new fields' names go in `extra_options`.""",
    )
    extra_options = List(
        Unicode(),
        config=True,
        help="""`user_options` keys that ops' own spawn-form fields (or their own
        `options_from_form`) add beside ScaleLab's (`profile`, `gpus`, `spark_driver_memory`).
        ScaleLab lets them through, unread, to `spawner.user_options` for ops' own hooks
        (`pre_spawn_hook`, `modify_pod_hook`), each value at most 4096 characters as JSON; any
        other key is refused with 400, as a tampered form is. Example:
        `c.ScaleLabSpawner.extra_options = ["course_group"]`.""",
    )

    _request: SpawnRequest | None = None
    _holding: Holding | None = None
    _base_start_timeout: float | None = None
    #: The configured ``(mem_limit, cpu_limit)``, kept at the first start (see
    #: :meth:`_apply_profile_limits`).
    _base_limits: tuple[Any, Any] | None = None
    _session_watch: asyncio.Task | None = None
    #: Whether this server was started before the hub's last restart (its state was loaded):
    #: a local process's exit status is then unknown, and JupyterHub reports it as 0.
    _resumed: bool = False
    #: Why each server's last run ended unexpectedly (found dead by poll), for the student;
    #: per server key, since JupyterHub may make a new spawner object for the next start.
    _exit_notes: ClassVar[dict[str, str]] = {}

    # -- the hub-wide GPU pool -------------------------------------------------------------------

    def make_gpu_source(self) -> GPUSource:
        """The GPU source ``gpu_source_class`` selects, made with this spawner's configuration
        and log (a :class:`~scalelab.spawner.gpu_source.DeclaredGPUs` gets ``declared_gpus``).

        Raises
        ------
        scalelab.common.strictconfig.UnknownSettingError
            The source's own section (``c.<ClassName>``) names a setting it does not have.
        """
        cls = source_class(self.gpu_source_class, bool(self.declared_gpus))
        if issubclass(cls, DeclaredGPUs):
            return cls(declared=self.declared_gpus, config=self.config, log=self.log)
        return cls(config=self.config, log=self.log)

    async def gpu_pool(self) -> GPUPool:
        """The hub's GPU pool; built from this spawner's settings on first use."""
        return await GPUPool.ensure(self)

    async def gpu_allocator(self) -> GPUAllocator:
        """The hub's allocator (:attr:`GPUPool.allocator <scalelab.spawner.gpu_pool.GPUPool>`)."""
        return (await self.gpu_pool()).allocator

    def spark_memory_offer(self) -> tuple[list[str], str]:
        """The Spark driver memory sizes of the spawn form, and the default one.

        :class:`~scalelab.spawner.course.CourseSpawnerMixin` provides it from its
        ``spark_driver_memory_choices`` and ``spark_driver_memory``.

        Returns
        -------
        tuple
            (JVM sizes such as ``["1g", "2g"]``, the default among them).

        Raises
        ------
        ValueError
            A size that is not a JVM size.
        """
        raise NotImplementedError(
            "GPUSpawnerMixin is a part of scalelab.spawner.course.CourseSpawnerMixin: "
            "put CourseSpawnerMixin first among the spawner's bases"
        )

    @property
    def server_key(self) -> str:
        """``"<user>/<server name>"``: this server in the ledger and the queue."""
        return f"{self.user.name}/{self.name}"

    def _profiles(self) -> list[Profile]:
        try:
            return profiles_from_config(self.profiles)
        except ValueError as exc:
            raise web.HTTPError(500, f"ScaleLab is misconfigured: {exc}") from None

    def _offered(self, total: int) -> list[Profile]:
        """The profiles this hub can serve to this user: those asking for at most its ``total``
        GPUs, and open to the user's JupyterHub groups (a profile's ``groups``)."""
        groups = self._who()[0]
        offered = [p for p in self._profiles() if p.gpus <= total and p.open_to(groups)]
        if not offered:
            raise web.HTTPError(
                500,
                f"ScaleLab is misconfigured: every profile asks for more GPUs than this hub has "
                f"({total}); add a CPU-only profile to c.ScaleLabSpawner.profiles.",
            )
        return offered

    # -- spawn form ------------------------------------------------------------------------------

    @default("options_form")
    def _default_options_form(self):
        return self.render_options_form

    async def render_options_form(self, spawner=None) -> str:
        """The spawn form's HTML: profiles with free-GPU counts, Spark driver memory."""
        allocator = await self.gpu_allocator()
        total = len(allocator.ledger.inventory)
        offered = self._offered(total)
        own = FileSystemLoader(str(templates_dir()))
        loader = ChoiceLoader(
            [
                FileSystemLoader([*self.options_template_paths, str(templates_dir())]),
                PrefixLoader({"scalelab": own}),  # ScaleLab's form, for ops' to extend
            ]
        )
        env = Environment(
            loader=loader,
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        memory, memory_default = self.spark_memory_offer()
        return env.get_template("spawn_options.html").render(
            profiles=offered,
            default=default_profile(offered).slug,
            free=len(allocator.ledger.free()),
            total=total,
            memory_choices=memory,
            memory_default=memory_default,
            queue_length=len(allocator.queue),
            last_exit=self._exit_notes.get(self.server_key, ""),
        )

    @default("options_from_form")
    def _default_options_from_form(self):
        # ScaleLab's reading of its form; ops' own c.<Spawner>.options_from_form (a callable,
        # or JupyterHub's "simple") replaces it, and its result is checked all the same.
        return options_from_form

    # -- per attempt: validate, then allocate ----------------------------------------------------

    @default("apply_user_options")
    def _default_apply_user_options(self):
        return GPUSpawnerMixin.apply_scalelab_options

    async def parse_options(self, user_options: Mapping[str, Any] | None) -> SpawnRequest:
        """``user_options`` read against what this hub offers (its profiles, memory sizes).

        Raises
        ------
        scalelab.spawner.profiles.OptionsError
            Unknown key, wrong type, unknown profile, too many GPUs for the profile, a memory
            size not offered; :class:`~scalelab.spawner.profiles.ProfileForbidden` for a profile
            kept for groups the user is not in.
        """
        check_profile_access(user_options, self._profiles(), self._who()[0])
        allocator = await self.gpu_allocator()
        offered = self._offered(len(allocator.ledger.inventory))
        memory, memory_default = self.spark_memory_offer()
        return parse_user_options(
            user_options, offered, memory, memory_default, extra_keys=self.extra_options
        )

    async def apply_scalelab_options(self, user_options: dict[str, Any] | None) -> None:
        """Validate this attempt's ``user_options`` (JupyterHub's ``apply_user_options`` hook).

        A refusal is one warning line in the hub log, naming the user and the reason, without
        JupyterHub's tracebacks and error lines about it (:mod:`scalelab.spawner.refusals`).

        Raises
        ------
        scalelab.spawner.refusals.OptionsRefused
            A ``tornado.web.HTTPError``: 400 for bad options (unknown key, wrong type, unknown
            profile, too many GPUs), 403 for a profile kept for groups the user is not in, 409
            when the user's other servers already hold their share. Nothing is allocated.
        """
        self._request = None  # every attempt starts from its own options
        allocator = await self.gpu_allocator()
        try:
            request = await self.parse_options(user_options)
            allocator.check(self.server_key, self.user.name, request.gpus, *self._who())
        except ProfileForbidden as exc:
            self._forget_options()
            raise self._refused(403, f"Profile not allowed: {exc}") from None
        except OptionsError as exc:
            self._forget_options()
            raise self._refused(400, f"Invalid server options: {exc}") from None
        except PolicyError as exc:
            self._forget_options()
            raise self._refused(exc.status, str(exc)) from None
        self._request = request
        self._apply_profile_limits(request.profile)
        if self._base_start_timeout is None:
            self._base_start_timeout = self.start_timeout  # as configured
        queue_s = (self.gpu_queue_timeout or _NO_QUEUE_LIMIT_S) if request.gpus else 0
        if self.concurrent_starts > 0:  # the wait for a turn to start (start_turn)
            queue_s += self.start_queue_timeout
        self.start_timeout = int(self._base_start_timeout + queue_s)

    def _apply_profile_limits(self, profile: Profile) -> None:
        """This start's ``mem_limit`` and ``cpu_limit``: the profile's where it sets them, else
        the configured ones (kept at the first start, so that one profile's never sticks to the
        next start of another)."""
        if self._base_limits is None:
            self._base_limits = (self.mem_limit, self.cpu_limit)
        memory, cpus = self._base_limits
        self.mem_limit = profile.mem_limit if profile.mem_limit is not None else memory
        self.cpu_limit = profile.cpu_limit if profile.cpu_limit is not None else cpus

    def _refused(self, status: int, message: str) -> OptionsRefused:
        return refuse(self.log, self.user.name, self.name, status, message)

    def _forget_options(self) -> None:
        """Drop the options of a failed attempt, which JupyterHub would reuse for the next start
        without options: a refused or abandoned GPU request must not come back."""
        if getattr(self, "orm_spawner", None) is not None:
            self.orm_spawner.user_options = None
            session = sqlalchemy.inspect(self.orm_spawner).session
            if session is not None:
                session.commit()

    @staticmethod
    def _policy() -> GPUPolicy | None:
        """The hub's GPU limits, or None while the pool is not built."""
        pool = GPUPool.current()
        return pool.policy if pool is not None else None

    def _who(self) -> tuple[list[str], bool]:
        """The user's JupyterHub groups, and whether limits spare them (an exempt admin)."""
        groups = [g.name for g in getattr(self.user, "groups", [])]
        policy = self._policy()
        exempt = bool(policy and policy.admins_exempt and getattr(self.user, "admin", False))
        return groups, exempt

    async def allocate_gpus(self) -> Holding:
        """Wait for this attempt's GPUs (queue), or none for a CPU-only request."""
        allocator = await self.gpu_allocator()
        if self._request is None:  # apply_user_options was overridden by ops: validate here
            await self.apply_scalelab_options(self.user_options)
        request = self._request
        assert request is not None
        if request.gpus and allocator.status(self.server_key) is None:
            self.log.info("%s asks for %d GPU(s)", self.server_key, request.gpus)
        groups, exempt = self._who()
        asked = time.monotonic()
        try:
            self._holding = await allocator.acquire(
                self.server_key,
                self.user.name,
                request.gpus,
                groups,
                exempt,
                server_name=self.name,
                user_options={
                    "profile": request.profile.slug,
                    "gpus": request.gpus,
                    "spark_driver_memory": request.spark_driver_memory,
                },
            )
        except RequestWithdrawn as exc:
            grace = self.gpu_abandon_timeout or PLACEHOLDER_GRACE_S
            message = (
                f"Your request for {request.gpus} GPU(s) was withdrawn from the queue: its "
                f"waiting page was closed for over {grace:.0f} s. Start your server again to "
                "queue anew (or start it without GPUs)."
            )
            raise spawn_failure(
                message,
                reason="gpu_request_abandoned",
                log_message=f"{self.server_key}: {exc} (ScaleLabSpawner.gpu_abandon_timeout)",
            ) from None
        if request.gpus:
            QUEUE_WAIT.observe(time.monotonic() - asked)
        if self._holding.gpus:
            self.log.info("%s holds GPU(s) %s", self.server_key, ", ".join(self._holding.gpus))
        return self._holding

    async def release_gpus(self, save: bool = True) -> None:
        """Give back this server's GPUs (and withdraw a queued request).

        ``save=False`` leaves a queued request in the saved queue (the hub is shutting down).
        """
        allocator = await self.gpu_allocator()
        await allocator.cancel(self.server_key, save=save)
        holding = allocator.ledger.holding(self.server_key)
        released = await allocator.release(self.server_key)
        if holding is not None and released:
            self.log.info("%s released GPU(s) %s", self.server_key, ", ".join(released))
            record_gpu_hours(self._who()[0], len(released), allocator.clock() - holding.since)
        self._holding = None
        for grant in allocator.spark.release(self.server_key):
            self.log.info(
                "%s released the %d executor GPU(s) of its Spark application %s",
                self.server_key,
                grant.gpus,
                grant.application,
            )

    def session_deadline(self) -> float | None:
        """When this server's GPU session ends (seconds since the epoch), or None: no GPUs or no
        ``GPUPolicy.max_gpu_session_hours``."""
        policy = self._policy()
        if (
            not self._holding
            or not self._holding.gpus
            or not policy
            or not policy.max_gpu_session_hours
        ):
            return None
        return self._holding.since + policy.max_gpu_session_hours * 3600

    def session_environment(self) -> dict[str, str]:
        """``SCALELAB_GPU_DEADLINE`` and ``SCALELAB_GPU_WARNING_S`` for the kernels' warnings."""
        deadline = self.session_deadline()
        policy = self._policy()
        if deadline is None or policy is None:
            return {}
        warning_s = policy.gpu_session_warning_minutes * 60
        return {envvars.GPU_DEADLINE: f"{deadline:.0f}", envvars.GPU_WARNING_S: f"{warning_s:.0f}"}

    def has_gpus_to_report(self) -> bool:
        """Whether this server holds GPUs whose readings it should report (its granted UUIDs)."""
        return bool(self.gpu_uuids)

    def gpu_report_environment(self) -> dict[str, str]:
        """``SCALELAB_GPU_REPORT_S`` (``gpu_report_interval``) for a server holding GPUs when the
        hub's GPU source takes the servers' reports (its ``wants_reports``); else nothing."""
        pool = GPUPool.current()
        if not self.has_gpus_to_report() or pool is None:
            return {}
        if not getattr(pool.source, "wants_reports", False):
            return {}
        return {envvars.GPU_REPORT_S: f"{self.gpu_report_interval:g}"}

    def _watch_session(self) -> None:
        """Stop the server when its GPU session ends (files are kept); once per server."""
        deadline = self.session_deadline()
        if deadline is None or (self._session_watch and not self._session_watch.done()):
            return

        async def stop_at_deadline() -> None:
            await asyncio.sleep(max(0.0, deadline - time.time()))
            self.log.warning(
                "%s reached GPUPolicy.max_gpu_session_hours: stopping it (files are kept)",
                self.server_key,
            )
            await self.user.stop(self.name)

        self._session_watch = asyncio.create_task(stop_at_deadline())

    @property
    def requested_gpus(self) -> int:
        """How many GPUs this start asked for, once its options were accepted (0: CPU only, or
        no start under way); the pending page explains the queue only for a GPU request."""
        return self._request.gpus if self._request is not None else 0

    @property
    def gpu_uuids(self) -> tuple[str, ...]:
        """UUIDs of the GPUs this server holds (empty: CPU only)."""
        return self._holding.gpus if self._holding else ()

    # -- progress on the pending page ------------------------------------------------------------

    async def progress(self):
        """Queue position and estimated wait while waiting for GPUs, the place in the line of
        starts (``concurrent_starts``); then what was granted."""
        announced = False
        last_place = None
        note = self._exit_notes.get(self.server_key)
        if note:
            yield {"progress": 0, "message": note}
        while self.pending == "spawn":
            allocator = await self.gpu_allocator()
            status = allocator.status(self.server_key)
            if status is not None:
                # Code before a yield runs only when the pending page asks for the next event:
                # someone is watching this request.
                allocator.heard_from(self.server_key)
                yield {
                    "progress": 10,
                    "message": (
                        f"Waiting for a GPU: you are number {status.position} of {status.length} "
                        f"in the queue, estimated wait {format_wait(status.wait_s)}. "
                        "Stop Server cancels the request."
                    ),
                    "scalelab_queue": {
                        "position": status.position,
                        "length": status.length,
                        "wait_s": None if math.isinf(status.wait_s) else round(status.wait_s),
                    },
                }
            elif (place := self.start_queue_place()) is not None:
                if place != last_place:  # told once per move in the line
                    last_place = place
                    yield {
                        "progress": 30,
                        "message": (
                            f"Waiting to start: {place.starting} servers are starting now (at "
                            f"most {place.limit} at once); you are number {place.position} of "
                            f"{place.length} in line."
                        ),
                        "scalelab_start_queue": {
                            "position": place.position,
                            "length": place.length,
                        },
                    }
            elif self._holding is not None and not announced:
                announced = True
                what = ", ".join(self._holding.gpus) if self._holding.gpus else "CPU only"
                yield {
                    "progress": 50,
                    "message": f"Resources granted ({what}); starting your server.",
                }
            await asyncio.sleep(1)

    # -- state -----------------------------------------------------------------------------------

    def get_state(self):
        state = super().get_state()
        if self._holding is not None and self._holding.gpus:
            state["scalelab"] = {
                "version": STATE_VERSION,
                "gpus": list(self._holding.gpus),
                "since": self._holding.since,
            }
        pool = GPUPool.current()
        grants = pool.allocator.spark.of_server(self.server_key) if pool is not None else []
        if grants:
            state["scalelab_spark"] = [grant.to_json() for grant in grants]
        return state

    def load_state(self, state):
        super().load_state(state)
        self._resumed = bool(state)
        for saved_grant in state.get("scalelab_spark", []):
            grant = SparkGrant(
                self.server_key,
                self.user.name,
                str(saved_grant["application"]),
                int(saved_grant["gpus"]),
                float(saved_grant["since"]),
            )
            GPUPool.restore_spark(grant)
        saved = state.get("scalelab")
        if not saved or saved.get("version") != STATE_VERSION:
            return
        holding = Holding(
            self.server_key, self.user.name, tuple(saved["gpus"]), float(saved["since"])
        )
        self._holding = holding
        GPUPool.restore(holding, self.log)

    def clear_state(self):
        super().clear_state()
        self._holding = None

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self):
        self._resumed = False
        try:
            await self.allocate_gpus()
            async with self.start_turn():
                # With a line of starts, the hub's start_timeout covers the queues too, and
                # the start itself gets the configured one.
                timeout = self._base_start_timeout if self.concurrent_starts > 0 else None
                url = await asyncio.wait_for(super().start(), timeout)
        except StartQueueTimeout as exc:
            await self.release_gpus()
            self._forget_options()
            raise spawn_failure(
                f"The hub is starting many servers at once: after {exc.timeout_s:.0f} s in "
                f"line, {exc.ahead} start(s) were still before yours. Start your server again "
                "in a minute; your files are kept.",
                reason="start_queue_timeout",
                log_message=f"{self.server_key}: {exc} (ScaleLabSpawner.start_queue_timeout)",
            ) from None
        except asyncio.CancelledError:
            # JupyterHub interrupting the spawn (a stop follows, which withdraws the request
            # from the saved queue too) or the hub shutting down (the saved queue keeps it).
            await self.release_gpus(save=False)
            self._forget_options()
            raise
        except BaseException:  # failed or abandoned: nothing may stay held
            await self.release_gpus()
            self._forget_options()
            raise
        self._exit_notes.pop(self.server_key, None)
        self._watch_session()
        return url

    async def stop(self, now=False):
        watch = self._session_watch
        if watch is not None and not watch.done() and watch is not asyncio.current_task():
            watch.cancel()
        if self._waiting_for_response:
            # JupyterHub stops a server that never answered its HTTP wait (http_timeout): a
            # failed start, whose options must not come back either.
            self._forget_options()
        try:
            await super().stop(now=now)
        finally:
            await self.release_gpus()

    def _how_it_ended(self, status: int) -> str:
        """A dead server's poll status in words; ``"exit status unknown: ..."`` for a server
        started before the hub's restart, which JupyterHub's local spawner reports as 0."""
        if self._resumed and status == 0:
            return "exit status unknown: it was started before the hub last restarted"
        return describe_exit(status)

    async def poll(self):
        status = await super().poll()
        allocator = await self.gpu_allocator()
        if status is None:
            self._watch_session()  # after a hub restart, too
        holding = allocator.ledger.holding(self.server_key)
        if status is not None and holding is not None and self.pending != "stop":
            when = dt.datetime.fromtimestamp(allocator.clock(), dt.UTC).strftime("%H:%M UTC")
            how = self._how_it_ended(status)
            self._exit_notes[self.server_key] = (
                f"Your previous server stopped unexpectedly ({how}); found at {when}; its GPU(s) "
                f"{', '.join(holding.gpus)} went back to the pool. Files in your home are kept."
            )
            self.log.warning(
                "%s died (%s) while holding GPU(s) %s: releasing them",
                self.server_key,
                how,
                ", ".join(holding.gpus),
            )
            await self.release_gpus()
        if allocator.ledger.quarantined():
            await allocator.recheck_quarantine()
        return status
