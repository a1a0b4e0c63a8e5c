"""The hub's GPUs, in one object: allocator, inventory, policy, source, saved queue, sweeper.

One :class:`GPUPool` per hub process, built once (at hub start, or at the first spawner's first
use); everything that needs the hub's GPU state asks it through :meth:`~GPUPool.current`,
:meth:`~GPUPool.ensure`, :meth:`~GPUPool.ensure_for` and :meth:`~GPUPool.restore`.
Why: docs/design-notes.md, scalelab.spawner.gpu_pool.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import ClassVar, Protocol

from traitlets.config import Config

from scalelab.common.gpu_inventory import GPUInventory, exclude
from scalelab.common.gpu_source import GPUSource, Reading
from scalelab.spawner import queue_store
from scalelab.spawner.allocator import GPUAllocator
from scalelab.spawner.ledger import Holding, LedgerError
from scalelab.spawner.metrics import GPU_SOURCE_ERRORS, register_collector
from scalelab.spawner.policy import GPUPolicy
from scalelab.spawner.spark_grants import SparkGrant

#: ``gpu_abandon_timeout`` of 0: a request restored after a restart still waits at most this
#: long for its spawn to be started again.
PLACEHOLDER_GRACE_S = 300.0


class PoolSettings(Protocol):
    """What the pool reads of a spawner (:class:`~scalelab.spawner.gpu_spawner.GPUSpawnerMixin`
    has all of it): its configuration, log, GPU settings and source."""

    config: Config
    log: logging.Logger
    exclude_gpus: list[str]
    fair_share_s_per_gpu_hour: float
    gpu_queue_file: str
    gpu_abandon_timeout: float

    def make_gpu_source(self) -> GPUSource:
        """The GPU source the spawner's settings select."""
        ...


class GPUPool:
    """The hub's GPU state (one per hub process; see the module docstring).

    Attributes
    ----------
    allocator
        Ledger, limits and queue (:class:`~scalelab.spawner.allocator.GPUAllocator`).
    inventory
        The GPUs it hands out, ``exclude_gpus`` left out.
    policy
        The limits (``c.GPUPolicy``).
    source
        Where the GPUs and their readings come from.
    """

    _current: ClassVar[GPUPool | None] = None
    _building: ClassVar[asyncio.Lock | None] = None
    #: Holdings found in spawners' saved state before the pool was built.
    _restores: ClassVar[list[Holding]] = []
    #: Spark applications' grants found in spawners' saved state before the pool was built.
    _spark_restores: ClassVar[list[SparkGrant]] = []

    def __init__(
        self,
        allocator: GPUAllocator,
        inventory: GPUInventory,
        policy: GPUPolicy,
        source: GPUSource,
        log: logging.Logger,
    ) -> None:
        self.allocator = allocator
        self.inventory = inventory
        self.policy = policy
        self.source = source
        self.log = log
        #: Why the GPU source's last reading failed (its exception, one line), or None.
        self.readings_problem: str | None = None
        # Kept so that the sweeper lives as long as the pool: the event loop holds only a weak
        # reference to a task, which the garbage collector may otherwise end mid-run.
        self._sweeper: asyncio.Task | None = None

    # -- the one pool of the hub -----------------------------------------------------------------

    @classmethod
    def current(cls) -> GPUPool | None:
        """The hub's pool, or None while it is not built."""
        return cls._current

    @classmethod
    async def ensure(cls, settings: PoolSettings) -> GPUPool:
        """The hub's pool, built from ``settings`` (a spawner) if it is not built yet.

        The first caller builds it; concurrent callers wait for that one. Later callers get the
        same pool, whatever their settings.

        Raises
        ------
        traitlets.TraitError, ValueError
            A bad ``c.GPUPolicy``, GPU source setting or declared GPU (nothing is built).
        """
        if cls._current is not None:
            return cls._current
        if cls._building is None:
            cls._building = asyncio.Lock()
        async with cls._building:
            if cls._current is None:
                await cls._build(settings)
        assert cls._current is not None
        return cls._current

    @classmethod
    async def ensure_for(cls, spawner_class: type, config: Config) -> GPUPool:
        """:meth:`ensure` from a spawner class's settings in the hub's ``config``.

        A spawner object without a user is made to read the settings (never started).

        Raises
        ------
        TypeError
            ``spawner_class`` has no ScaleLab GPU settings (it is not a :class:`PoolSettings`:
            no :class:`~scalelab.spawner.gpu_spawner.GPUSpawnerMixin` among its bases).
        traitlets.TraitError, ValueError
            As :meth:`ensure`.
        """
        if cls._current is not None:
            return cls._current
        if not (isinstance(spawner_class, type) and hasattr(spawner_class, "make_gpu_source")):
            raise TypeError(f"{spawner_class!r} has no ScaleLab GPU settings")
        return await cls.ensure(spawner_class(config=config))

    @classmethod
    def restore(cls, holding: Holding, log: logging.Logger) -> None:
        """Put ``holding`` (from a spawner's saved state) in the ledger: now when the pool is
        built, else when it is (before the saved queue goes back in line). A holding the ledger
        refuses (GPUs no longer in the inventory, or held twice) is logged and dropped."""
        if cls._current is not None:
            _restore(cls._current.allocator, holding, log)
        else:
            cls._restores.append(holding)

    @classmethod
    def restore_spark(cls, grant: SparkGrant) -> None:
        """Put a Spark application's ``grant`` (from its server's saved state) back: now when
        the pool is built, else when it is. Limits are not checked again (it was granted)."""
        if cls._current is not None:
            cls._current.allocator.spark.put(grant)
        else:
            cls._spark_restores.append(grant)

    @classmethod
    async def _build(cls, settings: PoolSettings) -> None:
        log = settings.log
        source = settings.make_gpu_source()
        inventory = exclude(await asyncio.to_thread(source.discover), settings.exclude_gpus)
        policy = GPUPolicy(config=settings.config)

        async def busy_check(uuid: str) -> str | None:
            try:
                return await asyncio.to_thread(source.busy, uuid)
            except Exception as exc:  # noqa: BLE001 -- any source's own error: kept out, not lost
                GPU_SOURCE_ERRORS.labels(call="busy").inc()
                problem = f"the GPU source could not check it ({_one_line(exc)})"
                log.warning("ScaleLab GPU %s: %s", uuid, problem)
                return problem  # quarantined until a later check of the source says it is free

        allocator = GPUAllocator(
            [g.uuid for g in inventory.gpus],
            policy.rules(),
            session_s=policy.max_gpu_session_hours * 3600 or 3600.0,
            fair_share_s_per_gpu_hour=settings.fair_share_s_per_gpu_hour,
            busy_check=busy_check,
        )
        log.info("ScaleLab GPU inventory: %s", inventory.describe())
        path = Path(settings.gpu_queue_file).resolve() if settings.gpu_queue_file else None
        saved = await _read_saved_queue(path, log)
        # No await from here on: holdings that spawners' load_state keeps for the pool meanwhile
        # (servers found at hub start) all go in before the queue.
        for holding in cls._restores:
            _restore(allocator, holding, log)
        cls._restores.clear()
        for grant in cls._spark_restores:
            allocator.spark.put(grant)
        cls._spark_restores.clear()
        if path is not None:
            _restore_queue(allocator, saved, path, log)
        pool = cls(allocator, inventory, policy, source, log)
        pool._sweeper = asyncio.create_task(
            _withdraw_abandoned(allocator, settings.gpu_abandon_timeout, log)
        )
        cls._current = pool
        register_collector(lambda: current.allocator if (current := cls.current()) else None)
        await allocator.save()

    # -- readings --------------------------------------------------------------------------------

    async def readings(self) -> dict[str, Reading]:
        """Utilisation and memory in use of the inventory's GPUs, from the source (in a worker
        thread): uuid -> (utilisation %, memory in use in MiB or None); a GPU left out is
        unknown. A source that raises leaves every GPU unknown (``{}``): its error is in
        :attr:`readings_problem`, the hub's log (once per new problem) and
        ``scalelab_gpu_source_errors_total``; nothing else fails."""
        uuids = [g.uuid for g in self.inventory.gpus]
        if not uuids:
            return {}
        try:
            found = await asyncio.to_thread(self.source.utilization, uuids)
        except Exception as exc:  # noqa: BLE001 -- any source's own error: readings unknown
            GPU_SOURCE_ERRORS.labels(call="utilization").inc()
            problem = f"{type(self.source).__name__} failed: {_one_line(exc)}"
            if problem != self.readings_problem:
                self.log.warning("ScaleLab GPU readings unknown: %s", problem)
            self.readings_problem = problem
            return {}
        self.readings_problem = None
        return found


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _restore(allocator: GPUAllocator, holding: Holding, log: logging.Logger) -> None:
    try:
        allocator.ledger.restore(holding)
    except LedgerError as exc:
        log.error("ScaleLab could not restore the GPUs of %s: %s", holding.server, exc)


async def _read_saved_queue(
    path: Path | None, log: logging.Logger
) -> list[queue_store.QueuedSpawn]:
    """The queue saved before a restart (empty without ``gpu_queue_file`` or a file).

    An unreadable file is moved aside to ``<file>.bad`` (nothing is lost) and logged."""
    if path is None:
        return []
    try:
        return await asyncio.to_thread(queue_store.read, path)
    except (queue_store.QueueFileError, OSError) as exc:
        aside = path.with_name(path.name + ".bad")
        await asyncio.to_thread(os.replace, path, aside)
        log.error(
            "ScaleLab could not read the saved GPU queue %s (%s); kept it as %s and started "
            "with an empty queue",
            path,
            exc,
            aside,
        )
        return []


def _restore_queue(
    allocator: GPUAllocator,
    saved: list[queue_store.QueuedSpawn],
    path: Path,
    log: logging.Logger,
) -> None:
    """Put the saved requests back in line; from now on, save every queue change to ``path``."""
    for spawn, why in allocator.restore_queue(saved):
        log.warning("ScaleLab dropped the saved GPU request of %s: %s", spawn.entry.server, why)
    restored = [s.entry.server for s in allocator.placeholders()]
    if restored:
        log.info(
            "ScaleLab GPU queue: %d request(s) restored from %s, in their places: %s",
            len(restored),
            path,
            ", ".join(restored),
        )
    allocator.saver = lambda line: _save_queue(path, line, log)


def _save_queue(path: Path, line: list[queue_store.QueuedSpawn], log: logging.Logger) -> None:
    """The allocator's saver (runs in a worker thread)."""
    try:
        queue_store.write(path, line)
    except OSError as exc:
        log.error(
            "ScaleLab could not save the GPU queue to %s (%s): a hub restart would lose it; "
            "check c.ScaleLabSpawner.gpu_queue_file",
            path,
            exc,
        )


async def _withdraw_abandoned(allocator: GPUAllocator, grace: float, log: logging.Logger) -> None:
    """Withdraw queued requests nobody watches, every few seconds, for the hub's life.

    ``grace`` is ``gpu_abandon_timeout`` in seconds (0: waiting spawns are never withdrawn for
    that; restored requests after :data:`PLACEHOLDER_GRACE_S`)."""
    placeholder_grace = grace or PLACEHOLDER_GRACE_S
    period = max(1.0, min(10.0, min(grace or placeholder_grace, placeholder_grace) / 5))
    while True:
        await asyncio.sleep(period)
        for server in await allocator.withdraw_abandoned(grace, placeholder_grace):
            log.warning(
                "%s withdrawn from the GPU queue: nobody watched its pending page for "
                "%.0f s (ScaleLabSpawner.gpu_abandon_timeout)",
                server,
                grace or placeholder_grace,
            )
