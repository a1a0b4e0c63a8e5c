"""The hub's GPU allocator: ledger, limits and queue behind one asyncio lock.

One :class:`GPUAllocator` serves every spawner of a hub. It does no process or NVML work
itself: a ``busy_check`` callable says whether a released GPU still has memory in use (NVML in
production), and the spawner launches servers. Everything runs on the hub's event loop and
nothing here blocks.

Life of a request::

    acquire() -- fits now and nobody waits --> Holding
             \\-- otherwise --> queued (position, estimated wait) --> granted --> Holding
                                   \\-- cancelled or abandoned --> removed, nothing held
    release() --> each GPU checked (busy_check) --> free, or quarantined with the reason
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from scalelab.spawner.ledger import GPULedger, Holding
from scalelab.spawner.policy import LimitRule, PolicyError, check_request, effective_limits
from scalelab.spawner.queue import (
    USAGE_WINDOW_S,
    GPUQueue,
    QueueEntry,
    Usage,
    estimate_waits,
    gpu_hours,
)

#: ``busy_check(uuid)`` -> None when no process holds memory on the GPU, else why it is busy.
BusyCheck = Callable[[str], Awaitable[str | None]]


async def never_busy(_uuid: str) -> str | None:
    """A busy check for GPUs that cannot be inspected (a declared inventory): always free."""
    return None


@dataclass(frozen=True)
class QueueStatus:
    """Where a waiting request stands: 1-based ``position`` of ``length``, ``wait_s`` estimated."""

    position: int
    length: int
    wait_s: float


class GPUAllocator:
    """Exclusive GPU allocation with limits and a fair queue, for one hub.

    Parameters
    ----------
    inventory
        UUIDs of the allocatable GPUs, in preference order.
    rules
        Limit rules (:meth:`scalelab.spawner.policy.GPUPolicy.rules`).
    session_s
        Typical seconds a server holds GPUs, for wait estimates.
    fair_share_s_per_gpu_hour
        See :mod:`scalelab.spawner.queue`.
    busy_check
        Async callable: does a released GPU still have memory in use? Default: :func:`never_busy`.
    clock
        Seconds since the epoch (``time.time``).
    """

    def __init__(
        self,
        inventory: Sequence[str],
        rules: Sequence[LimitRule] = (),
        *,
        session_s: float = 3600.0,
        fair_share_s_per_gpu_hour: float = 60.0,
        busy_check: BusyCheck = never_busy,
        clock: Callable[[], float] = time.time,
    ):
        self.ledger = GPULedger(inventory)
        self.queue = GPUQueue(fair_share_s_per_gpu_hour)
        self.rules = list(rules)
        self.session_s = session_s
        self.busy_check = busy_check
        self.clock = clock
        #: Ended holdings of the last 7 days (ongoing ones are in the ledger).
        self.usage: list[Usage] = []
        self._waiters: dict[str, asyncio.Future[Holding]] = {}
        self._lock = asyncio.Lock()

    # -- requests ------------------------------------------------------------------------------

    def check(
        self, server: str, user: str, gpus: int, groups: Iterable[str] = (), exempt: bool = False
    ) -> None:
        """Check a request against the limits and the inventory; changes nothing.

        Raises
        ------
        PolicyError
            Over a limit (400 or 409), or more GPUs than the hub has (400).
        """
        if gpus > len(self.ledger.inventory):
            raise PolicyError(
                f"{gpus} GPU(s) asked for, but this hub has {len(self.ledger.inventory)} in all."
            )
        today = dt.datetime.fromtimestamp(self.clock()).date()
        limits = effective_limits(self.rules, groups, today, exempt)
        own = self.ledger.holding(server)
        held = self.ledger.held_by_user(user) - (len(own.gpus) if own else 0)
        check_request(gpus, limits, held)

    async def acquire(
        self, server: str, user: str, gpus: int, groups: Iterable[str] = (), exempt: bool = False
    ) -> Holding:
        """Get ``gpus`` GPUs for ``server``, waiting in the queue while none are free.

        Cancelling the awaiting task (the spawn was cancelled or abandoned) takes the request
        out of the queue and gives back anything granted meanwhile.

        Raises
        ------
        PolicyError
            See :meth:`check`; nothing is queued or held.
        """
        groups = list(groups)
        async with self._lock:
            self.check(server, user, gpus, groups, exempt)
            if gpus == 0:
                return Holding(server, user, (), self.clock())
            if not len(self.queue) and len(self.ledger.free()) >= gpus:
                return self._grant(QueueEntry(server, user, gpus, self.clock()))
            self.queue.add(QueueEntry(server, user, gpus, self.clock()))
            waiter = asyncio.get_running_loop().create_future()
            self._waiters[server] = waiter
        try:
            holding = await waiter
        except asyncio.CancelledError:
            await self.cancel(server)
            raise
        self._waiters.pop(server, None)
        return holding

    async def cancel(self, server: str) -> None:
        """Withdraw ``server``'s request: out of the queue; GPUs granted meanwhile given back."""
        async with self._lock:
            self.queue.remove(server)
            waiter = self._waiters.pop(server, None)
            granted = waiter is not None and waiter.done() and not waiter.cancelled()
            if waiter is not None and not waiter.done():
                waiter.cancel()
        if granted:
            await self.release(server)

    async def release(self, server: str) -> tuple[str, ...]:
        """Give back ``server``'s GPUs; one whose memory is still in use is quarantined.

        Returns
        -------
        tuple of str
            The GPUs taken back (free or quarantined); empty if it held none.
        """
        async with self._lock:
            holding = self.ledger.holding(server)
            gpus = self.ledger.release(server)
            if holding is not None and gpus:
                now = self.clock()
                self.usage = [u for u in self.usage if u.end and u.end > now - USAGE_WINDOW_S]
                self.usage.append(Usage(holding.user, len(gpus), holding.since, now))
        for gpu in gpus:
            reason = await self.busy_check(gpu)
            if reason:
                async with self._lock:
                    self.ledger.quarantine(gpu, f"released by {server}, but {reason}")
        await self.dispatch()
        return gpus

    async def recheck_quarantine(self) -> list[str]:
        """Return quarantined GPUs whose memory is free again to the pool; returns them."""
        cleared = [g for g in self.ledger.quarantined() if not await self.busy_check(g)]
        async with self._lock:
            self.ledger.clear(cleared)
        await self.dispatch()
        return cleared

    async def restore(self, holding: Holding) -> None:
        """Re-enter a holding saved in a server's state, after a hub restart.

        Raises
        ------
        LedgerError
            It would give a GPU twice, or names a GPU not in the inventory.
        """
        async with self._lock:
            self.ledger.restore(holding)

    async def dispatch(self) -> None:
        """Serve waiting requests from the head of the queue while GPUs are free."""
        async with self._lock:
            for entry in self.queue.grantable(len(self.ledger.free()), self.gpu_hours()):
                self.queue.remove(entry.server)
                waiter = self._waiters.get(entry.server)
                if waiter is not None and not waiter.done():
                    waiter.set_result(self._grant(entry))

    # -- views ---------------------------------------------------------------------------------

    def status(self, server: str) -> QueueStatus | None:
        """Position and estimated wait of ``server``'s request; None if it does not wait."""
        return self.statuses().get(server) if server in self.queue else None

    def statuses(self) -> dict[str, QueueStatus]:
        """Position and estimated wait of every waiting request, computed in one pass, in order."""
        line = self.queue.ordered(self.gpu_hours())
        held_since = [h.since for h in self.ledger.holdings() for _ in h.gpus]
        waits = estimate_waits(
            line, len(self.ledger.free()), held_since, self.clock(), self.session_s
        )
        return {
            e.server: QueueStatus(i, len(line), waits[e.server])
            for i, e in enumerate(line, start=1)
        }

    def gpu_hours(self) -> dict[str, float]:
        """GPU-hours per user in the last 7 days, ongoing holdings included."""
        ongoing = [Usage(h.user, len(h.gpus), h.since) for h in self.ledger.holdings()]
        return gpu_hours([*self.usage, *ongoing], self.clock())

    # -- internals -----------------------------------------------------------------------------

    def _grant(self, entry: QueueEntry) -> Holding:
        return self.ledger.allocate(entry.server, entry.user, entry.gpus, self.clock())
