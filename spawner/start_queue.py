"""The hub's line of server starts: at most ``concurrent_starts`` servers start at once, the
others wait their turn in arrival order and see their place.

:class:`StartQueue` is the line (one per hub process, one event loop); :class:`StartQueueMixin`
gives a spawner its settings and :meth:`~StartQueueMixin.start_turn`. Why a line instead of
JupyterHub's ``concurrent_spawn_limit`` (HTTP 429, "try again"): docs/operators-guide.md, "A
whole class at once".
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator
from typing import ClassVar, NamedTuple

from traitlets import Float, Integer
from traitlets.config import LoggingConfigurable

#: The local spawner's ``concurrent_starts``: servers starting on one host at once, at most.
LOCAL_CONCURRENT_STARTS = 20


class StartQueueTimeout(Exception):
    """A start waited longer than its ``timeout_s`` for its turn; ``ahead`` starts (starting,
    or waiting before it) were still before it."""

    def __init__(self, timeout_s: float, ahead: int):
        super().__init__(f"no turn to start after {timeout_s:.0f} s ({ahead} still ahead)")
        self.timeout_s = timeout_s
        self.ahead = ahead


class Place(NamedTuple):
    """A waiting start's place: ``position`` (1 = next) of ``length`` waiting, while
    ``starting`` servers start (at most ``limit``)."""

    position: int
    length: int
    starting: int
    limit: int


class StartQueue:
    """Server starts, at most ``limit`` at once, the rest first come, first served.

    One object per hub (:meth:`shared`), used from the hub's event loop only. A start that is
    cancelled or times out while waiting leaves the line and takes no turn; one that ends
    (returns or raises) hands its turn to the first in line.
    """

    _shared: ClassVar[StartQueue | None] = None

    def __init__(self, limit: int):
        self.limit = limit
        self._starting: set[str] = set()
        self._waiting: collections.OrderedDict[str, asyncio.Future[None]] = (
            collections.OrderedDict()
        )

    @classmethod
    def current(cls) -> StartQueue | None:
        """The hub's line as it is, or None before the first start (nothing changed)."""
        return cls._shared

    @classmethod
    def shared(cls, limit: int) -> StartQueue:
        """The hub's line, its limit set to ``limit`` (the setting read at each start)."""
        if cls._shared is None:
            cls._shared = cls(limit)
        cls._shared.limit = limit
        cls._shared._hand_over()  # a larger limit lets the first in line go now
        return cls._shared

    def place(self, key: str) -> Place | None:
        """``key``'s place in line, or None when it is not waiting (starting, or not here)."""
        for position, waiting in enumerate(self._waiting, start=1):
            if waiting == key:
                return Place(position, len(self._waiting), len(self._starting), self.limit)
        return None

    @property
    def starting(self) -> frozenset[str]:
        """The starts that hold a turn now."""
        return frozenset(self._starting)

    @contextlib.asynccontextmanager
    async def turn(self, key: str, timeout_s: float) -> AsyncIterator[None]:
        """Wait (at most ``timeout_s`` seconds) for ``key``'s turn, hold it for the ``with``
        body, then hand it on.

        Raises
        ------
        StartQueueTimeout
            No turn came within ``timeout_s``; ``key`` left the line.
        ValueError
            ``key`` is already starting or waiting (one start per server at a time).
        """
        if key in self._starting or key in self._waiting:
            raise ValueError(f"{key} is already starting")
        if len(self._starting) < self.limit and not self._waiting:
            self._starting.add(key)
        else:
            await self._wait(key, timeout_s)
        try:
            yield
        finally:
            self._starting.discard(key)
            self._hand_over()

    async def _wait(self, key: str, timeout_s: float) -> None:
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[key] = turn
        try:
            await asyncio.wait_for(asyncio.shield(turn), timeout_s)
        except BaseException as exc:
            place = self.place(key)
            if self._waiting.pop(key, None) is None:  # the turn came as the wait ended
                self._starting.discard(key)
                self._hand_over()
            if isinstance(exc, TimeoutError):
                ahead = place.position - 1 + place.starting if place else 0
                raise StartQueueTimeout(timeout_s, ahead) from None
            raise

    def _hand_over(self) -> None:
        """Give free turns to the first in line."""
        while self._waiting and len(self._starting) < self.limit:
            key, turn = self._waiting.popitem(last=False)
            self._starting.add(key)
            turn.set_result(None)


class StartQueueMixin(LoggingConfigurable):
    """A spawner's place in the hub's line of starts (:class:`StartQueue`); put it before
    JupyterHub's ``Spawner`` among a spawner class's bases."""

    server_key: str  # the spawner's "<user>/<server name>"

    concurrent_starts = Integer(
        0,
        config=True,
        help="""Servers this hub starts at once, at most; later starts wait their turn in
        arrival order, and their pending page says their place. A start's turn begins after
        its GPUs are granted and ends when its server listens (or its start fails), so a GPU
        queue holds no turn. 0: no bound (the Slurm and Kubernetes spawners' default: their
        schedulers place servers on other hosts). The local spawner's default: 20. Lower is
        not faster: on 2 cores, 12 students starting at once had their first cells answered
        within 42 s, 2 at a time within 111 s (the first students' kernels took the cores
        from the later starts; docs/benchmarks.md, class_start.py). Use it instead of
        JupyterHub's `concurrent_spawn_limit`, which refuses the extra starts with HTTP 429
        and counts GPU-queued starts among them (`scalelab up` sets that one to 0).""",
    )

    start_queue_timeout = Float(
        600.0,
        config=True,
        help="""Seconds a start may wait for its turn (`concurrent_starts`) before it fails
        with a message that says how many starts were ahead; the hub's `start_timeout` is
        lengthened by this much and still bounds the start itself.""",
    )

    def start_queue(self) -> StartQueue | None:
        """The hub's line of starts, or None with ``concurrent_starts`` 0."""
        return StartQueue.shared(self.concurrent_starts) if self.concurrent_starts > 0 else None

    def start_queue_place(self) -> Place | None:
        """This server's place in the line while it waits to start, else None (read only:
        the pending page asks every second)."""
        line = StartQueue.current() if self.concurrent_starts > 0 else None
        return line.place(self.server_key) if line is not None else None

    @contextlib.asynccontextmanager
    async def start_turn(self) -> AsyncIterator[None]:
        """This server's turn to start (no wait with ``concurrent_starts`` 0).

        Raises
        ------
        StartQueueTimeout
            No turn within ``start_queue_timeout`` seconds.
        """
        line = self.start_queue()
        if line is None:
            yield
            return
        key = self.server_key
        asked = time.monotonic()
        async with line.turn(key, self.start_queue_timeout):
            self.log.info(
                "%s: turn to start after %.1f s in line (%d of at most %d starting)",
                key,
                time.monotonic() - asked,
                len(line.starting),
                line.limit,
            )
            try:
                yield
            finally:
                self.log.info("%s: turn to start ended", key)
