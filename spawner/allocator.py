"""The hub's GPU allocator: ledger, limits and queue behind one asyncio lock.

One :class:`GPUAllocator` serves every spawner of a hub, on its event loop, blocking nothing:
``acquire`` grants now or queues, ``release`` checks each GPU (``busy_check``), ``restore_queue``
brings saved requests back as placeholders, ``withdraw_abandoned`` ends unwatched ones.
Why: docs/design-notes.md, scalelab.spawner.allocator.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scalelab.spawner.ledger import GPULedger, Holding
from scalelab.spawner.policy import (
    LimitRule,
    PolicyError,
    check_application,
    check_request,
    effective_limits,
)
from scalelab.spawner.queue import (
    DEFAULT_FAIR_SHARE_S_PER_GPU_HOUR,
    USAGE_WINDOW_S,
    GPUQueue,
    QueueEntry,
    Usage,
    estimate_waits,
    gpu_hours,
)
from scalelab.spawner.queue_store import QueuedSpawn
from scalelab.spawner.spark_grants import SparkGrant, SparkGrants

#: ``busy_check(uuid)`` -> None when no process holds memory on the GPU, else why it is busy.
BusyCheck = Callable[[str], Awaitable[str | None]]
#: ``saver(queue)``: persist the waiting requests, oldest first. Blocking; run in a thread.
Saver = Callable[[list[QueuedSpawn]], None]


class RequestWithdrawn(Exception):
    """A waiting request was taken out of the queue because nobody watched it (abandoned)."""


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
    saver
        Called (in a worker thread) with the waiting requests after every queue change;
        None: the queue lives in memory only.
    """

    def __init__(
        self,
        inventory: Sequence[str],
        rules: Sequence[LimitRule] = (),
        *,
        session_s: float = 3600.0,
        fair_share_s_per_gpu_hour: float = DEFAULT_FAIR_SHARE_S_PER_GPU_HOUR,
        busy_check: BusyCheck = never_busy,
        clock: Callable[[], float] = time.time,
        saver: Saver | None = None,
    ):
        self.ledger = GPULedger(inventory)
        #: Executor GPUs of students' Spark applications on a cluster (counted, not picked).
        self.spark = SparkGrants()
        self.queue = GPUQueue(fair_share_s_per_gpu_hour)
        self.rules = list(rules)
        self.session_s = session_s
        self.busy_check = busy_check
        self.clock = clock
        #: Ended holdings of the last 7 days (ongoing ones are in the ledger).
        self.usage: list[Usage] = []
        self.saver = saver
        #: What is saved of each waiting request (server -> how to start it again).
        self.queued: dict[str, QueuedSpawn] = {}
        #: When someone last listened to each waiting request (its pending page), or it arrived.
        self._heard: dict[str, float] = {}
        self._waiters: dict[str, asyncio.Future[Holding]] = {}
        self._lock = asyncio.Lock()
        self._save_lock = asyncio.Lock()

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
        check_request(gpus, limits, held + self.spark.held_by_user(user))

    async def acquire(
        self,
        server: str,
        user: str,
        gpus: int,
        groups: Iterable[str] = (),
        exempt: bool = False,
        *,
        server_name: str = "",
        user_options: Mapping[str, Any] | None = None,
    ) -> Holding:
        """Get ``gpus`` GPUs for ``server``, waiting in the queue while none are free.

        A placeholder of ``server`` (a request restored after a hub restart) is taken over: the
        request keeps its original place. ``server_name`` and ``user_options`` are saved with
        a waiting request, to start it again after a hub restart.

        Cancelling the awaiting task takes the request out of the queue and gives back anything
        granted meanwhile; the saved queue is left as it was (a hub shutting down cancels every
        task, and its queue must survive). :meth:`cancel` withdraws a request for good.

        Raises
        ------
        PolicyError
            See :meth:`check`; nothing is queued or held.
        RequestWithdrawn
            Nobody listened to the request for the grace time (:meth:`withdraw_abandoned`).
        """
        groups = list(groups)
        async with self._lock:
            self.check(server, user, gpus, groups, exempt)
            # A restored request of this server is taken over (or dropped, if now CPU-only).
            placeholder = self.queue.remove(server)
            if gpus == 0 or (
                placeholder is None and not len(self.queue) and len(self.ledger.free()) >= gpus
            ):
                self._unqueue(server)
                waiter = None
                holding = (
                    self._grant(QueueEntry(server, user, gpus, self.clock()))
                    if gpus
                    else Holding(server, user, (), self.clock())
                )
            else:
                arrived = placeholder.enqueued if placeholder is not None else self.clock()
                entry = QueueEntry(server, user, gpus, arrived)
                self.queue.add(entry)
                self.queued[server] = QueuedSpawn(entry, server_name, dict(user_options or {}))
                self._heard[server] = self.clock()
                waiter = asyncio.get_running_loop().create_future()
                self._waiters[server] = waiter
        if waiter is None:
            if placeholder is not None:
                await self.save()
            return holding
        try:
            await self.save()
            await self.dispatch()  # a restored place may be served at once
            holding = await waiter
        except asyncio.CancelledError:
            await self.cancel(server, save=False)
            raise
        finally:
            if self._waiters.get(server) is waiter:
                del self._waiters[server]
        return holding

    async def cancel(self, server: str, *, save: bool = True) -> None:
        """Withdraw ``server``'s request: out of the queue; GPUs granted meanwhile given back.

        ``save=False`` leaves the saved queue as it is (see :meth:`acquire`).
        """
        async with self._lock:
            queued = self._unqueue(server)
            waiter = self._waiters.pop(server, None)
            granted = waiter is not None and waiter.done() and not waiter.cancelled()
            granted = granted and waiter.exception() is None
            if waiter is not None and not waiter.done():
                waiter.cancel()
        if queued and save:
            await self.save()
        if granted:
            await self.release(server)

    def heard_from(self, server: str) -> None:
        """Someone is watching ``server``'s waiting request (its pending page pulled an event)."""
        if server in self.queue:
            self._heard[server] = self.clock()

    async def withdraw_abandoned(self, grace_s: float, placeholder_grace_s: float) -> list[str]:
        """Take out of the queue the requests nobody listened to for the grace time.

        Parameters
        ----------
        grace_s
            Seconds a waiting spawn may go without a listener; 0: never withdrawn for that.
        placeholder_grace_s
            Seconds a restored request may wait for its spawn to be started again.

        Returns
        -------
        list of str
            The servers withdrawn; each one's :meth:`acquire` raises :class:`RequestWithdrawn`.
        """
        now = self.clock()
        withdrawn = []
        async with self._lock:
            for entry in self.queue.ordered({}):
                waiter = self._waiters.get(entry.server)
                grace = grace_s if waiter is not None else placeholder_grace_s
                if not grace or now - self._heard.get(entry.server, now) <= grace:
                    continue
                self._unqueue(entry.server)
                withdrawn.append(entry.server)
                if waiter is not None and not waiter.done():
                    waiter.set_exception(
                        RequestWithdrawn(
                            f"nobody watched the request's pending page for {grace:.0f} s"
                        )
                    )
        if withdrawn:
            await self.save()
            await self.dispatch()
        return withdrawn

    def restore_queue(self, spawns: Iterable[QueuedSpawn]) -> list[tuple[QueuedSpawn, str]]:
        """Put requests saved before a hub restart back in line, as placeholders.

        Returns
        -------
        list
            ``(spawn, why)`` for each request left out: its server already holds GPUs (it was
            granted before the hub stopped), it waits already, or it asks for more GPUs than
            this hub has.
        """
        skipped = []
        now = self.clock()
        for spawn in spawns:
            server = spawn.entry.server
            if self.ledger.holding(server) is not None:
                skipped.append((spawn, "its server already holds GPUs"))
            elif server in self.queue:
                skipped.append((spawn, "it is already in the queue"))
            elif not 1 <= spawn.entry.gpus <= len(self.ledger.inventory):
                skipped.append((spawn, f"this hub has {len(self.ledger.inventory)} GPU(s)"))
            else:
                self.queue.add(spawn.entry)
                self.queued[server] = spawn
                self._heard[server] = now
        return skipped

    def placeholders(self) -> list[QueuedSpawn]:
        """Restored requests whose spawn has not been started again, oldest first."""
        return [
            self.queued[e.server]
            for e in self.queue.ordered({})
            if e.server not in self._waiters and e.server in self.queued
        ]

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

    async def take_over(self, holding: Holding) -> dict[str, tuple[str, ...]]:
        """:meth:`GPULedger.take_over`: ``holding`` as the scheduler records it; the GPU time of
        what it took from other servers is counted up to now (for the dated caps).

        Returns
        -------
        dict
            Server -> the GPUs taken from it.

        Raises
        ------
        LedgerError
            A GPU is not in the inventory.
        """
        async with self._lock:
            before = {h.server: h for h in self.ledger.holdings()}
            taken = self.ledger.take_over(holding)
            now = self.clock()
            for server, gpus in taken.items():
                self.usage.append(Usage(before[server].user, len(gpus), before[server].since, now))
        return taken

    async def dispatch(self) -> None:
        """Serve waiting requests from the head of the queue while GPUs are free."""
        async with self._lock:
            served = False
            for entry in self.queue.grantable(len(self.ledger.free()), self.gpu_hours()):
                waiter = self._waiters.get(entry.server)
                if waiter is None or waiter.done():
                    continue  # a placeholder keeps its place and its GPUs until it resumes
                self._unqueue(entry.server)
                waiter.set_result(self._grant(entry))
                served = True
        if served:
            await self.save()

    # -- Spark applications on a cluster ---------------------------------------------------------

    async def grant_spark(
        self,
        server: str,
        user: str,
        application: str,
        gpus: int,
        groups: Iterable[str] = (),
        exempt: bool = False,
    ) -> SparkGrant:
        """Count ``gpus`` executor GPUs of ``application`` (in ``server``) toward ``user``'s
        limits, replacing that application's previous grant; nothing is picked from the
        inventory (the cluster's scheduler places executors).

        Raises
        ------
        PolicyError
            Over a limit (:func:`~scalelab.spawner.policy.check_application`: 400 or 409), or
            too many applications on one server (409). Nothing changes.
        """
        async with self._lock:
            today = dt.datetime.fromtimestamp(self.clock()).date()
            limits = effective_limits(self.rules, groups, today, exempt)
            previous = self.spark.get(server, application)
            held = self.ledger.held_by_user(user) + self.spark.held_by_user(user)
            check_application(gpus, limits, held - (previous.gpus if previous else 0))
            grant = SparkGrant(server, user, application, gpus, self.clock())
            try:
                self.spark.put(grant)
            except ValueError as exc:
                raise PolicyError(str(exc), status=409) from None
            return grant

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

    def _unqueue(self, server: str) -> bool:
        """Forget ``server``'s waiting request (call under the lock); True if it was there."""
        self._heard.pop(server, None)
        self.queued.pop(server, None)
        return self.queue.remove(server) is not None

    async def save(self) -> None:
        """Hand the queue, oldest first, to the saver (in a thread); the latest state wins."""
        if self.saver is None:
            return
        async with self._save_lock:
            line = [
                self.queued[e.server] for e in self.queue.ordered({}) if e.server in self.queued
            ]
            await asyncio.to_thread(self.saver, line)
