"""The GPU ledger: which server holds which GPU (pure logic, no I/O).

Invariant: a GPU is held by at most one server. Every change goes through :class:`GPULedger`,
which refuses anything that would break it. GPUs are named by NVML UUID, never by host index.
A GPU goes free, held, then free again, or quarantined (memory still in use) until cleared.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace


class LedgerError(RuntimeError):
    """A ledger change that would give a GPU twice, or that names an unknown GPU or server."""


@dataclass(frozen=True)
class Holding:
    """GPUs held by one server.

    Attributes
    ----------
    server
        The server's key, ``"<user>/<server name>"`` (``"alice/"`` for the default server).
    user
        The user's name.
    gpus
        NVML UUIDs, in allocation order.
    since
        When the GPUs were allocated, seconds since the epoch.
    """

    server: str
    user: str
    gpus: tuple[str, ...]
    since: float


class GPULedger:
    """Allocation state of a fixed inventory of GPUs.

    Parameters
    ----------
    inventory
        UUIDs of the allocatable GPUs (or MIG instances), in preference order: allocation takes
        the first free ones.
    """

    def __init__(self, inventory: Sequence[str]):
        if len(set(inventory)) != len(inventory):
            raise LedgerError(f"the GPU inventory names a GPU twice: {list(inventory)}")
        self._inventory = tuple(inventory)
        self._holdings: dict[str, Holding] = {}
        self._holder: dict[str, str] = {}
        self._quarantine: dict[str, str] = {}

    @property
    def inventory(self) -> tuple[str, ...]:
        """Every GPU of the ledger, in preference order."""
        return self._inventory

    def free(self) -> list[str]:
        """GPUs neither held nor quarantined, in preference order."""
        return [g for g in self._inventory if g not in self._holder and g not in self._quarantine]

    def holdings(self) -> list[Holding]:
        """Every server's holding, oldest first."""
        return sorted(self._holdings.values(), key=lambda h: (h.since, h.server))

    def holding(self, server: str) -> Holding | None:
        """What ``server`` holds, or None."""
        return self._holdings.get(server)

    def holder(self, gpu: str) -> str | None:
        """The server holding ``gpu``, or None."""
        return self._holder.get(gpu)

    def held_by_user(self, user: str) -> int:
        """Number of GPUs that ``user``'s servers hold together."""
        return sum(len(h.gpus) for h in self._holdings.values() if h.user == user)

    def quarantined(self) -> dict[str, str]:
        """Quarantined GPUs -> why (e.g. a process of the previous holder still has memory)."""
        return dict(self._quarantine)

    def allocate(self, server: str, user: str, count: int, now: float) -> Holding:
        """Give ``count`` free GPUs to ``server``.

        Returns
        -------
        Holding
            The new holding (``gpus`` empty when ``count`` is 0).

        Raises
        ------
        LedgerError
            ``server`` already holds GPUs, ``count`` is negative, or fewer than ``count`` GPUs
            are free. Nothing changes.
        """
        if count < 0:
            raise LedgerError(f"cannot allocate {count} GPUs")
        if server in self._holdings:
            raise LedgerError(f"server {server} already holds {list(self._holdings[server].gpus)}")
        free = self.free()
        if count > len(free):
            raise LedgerError(f"{count} GPU(s) asked for, {len(free)} free")
        holding = Holding(server, user, tuple(free[:count]), now)
        return self._hold(holding) if count else holding

    def restore(self, holding: Holding) -> None:
        """Re-enter a holding saved in a server's state (after a hub restart).

        Raises
        ------
        LedgerError
            A GPU is not in the inventory, or is held by another server: restoring it would give
            it twice. Nothing changes.
        """
        unknown = [g for g in holding.gpus if g not in self._inventory]
        if unknown:
            raise LedgerError(f"server {holding.server} holds GPUs not in the inventory: {unknown}")
        for gpu in holding.gpus:
            other = self._holder.get(gpu)
            if other is not None and other != holding.server:
                raise LedgerError(f"GPU {gpu} of server {holding.server} is held by {other}")
        self.release(holding.server)
        if holding.gpus:
            self._hold(holding)

    def take_over(self, holding: Holding) -> dict[str, tuple[str, ...]]:
        """Enter ``holding`` as a scheduler's own record has it (Slurm: a job now runs on these
        GPUs), taking its GPUs from whichever server the ledger still has on them, and out of
        quarantine. The scheduler never gives a GPU twice, so such a server's job ended and the
        ledger has not heard yet; it keeps its other GPUs, or is dropped if none are left.

        Returns
        -------
        dict
            Server -> the GPUs taken from it; empty when the GPUs were free.

        Raises
        ------
        LedgerError
            A GPU is not in the inventory. Nothing changes.
        """
        unknown = [g for g in holding.gpus if g not in self._inventory]
        if unknown:
            raise LedgerError(f"server {holding.server} holds GPUs not in the inventory: {unknown}")
        taken: dict[str, tuple[str, ...]] = {}
        for gpu in holding.gpus:
            other = self._holder.get(gpu)
            if other is not None and other != holding.server:
                taken[other] = (*taken.get(other, ()), gpu)
        for other, gpus in taken.items():
            old = self._holdings.pop(other)
            for gpu in gpus:
                del self._holder[gpu]
            kept = tuple(g for g in old.gpus if g not in gpus)
            if kept:
                self._holdings[other] = replace(old, gpus=kept)
        self.clear(holding.gpus)
        self.restore(holding)
        return taken

    def release(self, server: str) -> tuple[str, ...]:
        """Take back every GPU of ``server``; returns them (empty when it held none)."""
        holding = self._holdings.pop(server, None)
        if holding is None:
            return ()
        for gpu in holding.gpus:
            del self._holder[gpu]
        return holding.gpus

    def quarantine(self, gpu: str, reason: str) -> None:
        """Keep a free GPU out of allocation until :meth:`clear` (it still has a process on it)."""
        if gpu not in self._inventory:
            raise LedgerError(f"unknown GPU {gpu}")
        if gpu in self._holder:
            raise LedgerError(f"GPU {gpu} is held by {self._holder[gpu]}; release it first")
        self._quarantine[gpu] = reason

    def clear(self, gpus: Iterable[str]) -> None:
        """Return quarantined GPUs to the pool."""
        for gpu in gpus:
            self._quarantine.pop(gpu, None)

    def _hold(self, holding: Holding) -> Holding:
        taken = [g for g in holding.gpus if g in self._holder or g in self._quarantine]
        if taken:
            raise LedgerError(f"GPUs {taken} are not free")
        self._holdings[holding.server] = holding
        for gpu in holding.gpus:
            self._holder[gpu] = holding.server
        return holding
