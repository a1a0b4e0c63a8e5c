"""The GPU queue: fair order, positions and estimated waits (pure logic, no I/O).

First come, first served, each request's place moved back by ``fair_share_s_per_gpu_hour``
(default 300 s) per GPU-hour its user held in the last 7 days; the head of the line is served
first. The rule for students and ops is in docs/students-guide.md and docs/operators-guide.md.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

#: Seconds in the fair-share window (7 days).
USAGE_WINDOW_S = 7 * 24 * 3600.0
#: Seconds a request moves back in line per GPU-hour its user held (5 minutes). Chosen with
#: ``bench/allocation.py`` (1,000 requests of 100 users with the same workload, 5 seeds): Jain's
#: fairness of the GPU-hours received 0.970-0.987 at 8 GPUs and 0.984-0.990 at 64, where 60 s
#: gave 0.931-0.950 and 0.935-0.961; the mean wait grows about 3 %; 600 s and more gain little.
DEFAULT_FAIR_SHARE_S_PER_GPU_HOUR = 300.0


@dataclass(frozen=True)
class QueueEntry:
    """A spawn waiting for GPUs.

    Attributes
    ----------
    server
        ``"<user>/<server name>"``; a server waits at most once.
    user
        The user's name.
    gpus
        GPUs asked for (>= 1).
    enqueued
        Arrival time, seconds since the epoch.
    """

    server: str
    user: str
    gpus: int
    enqueued: float


@dataclass(frozen=True)
class Usage:
    """GPUs held by a user over an interval, for fair share and GPU-hour metrics.

    ``end`` None means still held.
    """

    user: str
    gpus: int
    start: float
    end: float | None = None


def gpu_hours(
    usage: Iterable[Usage], now: float, window_s: float = USAGE_WINDOW_S
) -> dict[str, float]:
    """GPU-hours per user in the last ``window_s`` seconds before ``now`` (ongoing use counts)."""
    since = now - window_s
    totals: dict[str, float] = {}
    for u in usage:
        overlap = min(u.end if u.end is not None else now, now) - max(u.start, since)
        if overlap > 0:
            totals[u.user] = totals.get(u.user, 0.0) + u.gpus * overlap / 3600.0
    return totals


class GPUQueue:
    """Spawns waiting for GPUs, in fair order.

    Parameters
    ----------
    fair_share_s_per_gpu_hour
        Seconds a request moves back in line for each GPU-hour its user held in the last 7 days.
    """

    def __init__(self, fair_share_s_per_gpu_hour: float = DEFAULT_FAIR_SHARE_S_PER_GPU_HOUR):
        self.fair_share_s_per_gpu_hour = fair_share_s_per_gpu_hour
        self._entries: dict[str, QueueEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, server: str) -> bool:
        return server in self._entries

    def add(self, entry: QueueEntry) -> None:
        """Put a request in line.

        Raises
        ------
        ValueError
            The server already waits, or asks for fewer than one GPU.
        """
        if entry.server in self._entries:
            raise ValueError(f"server {entry.server} is already waiting for GPUs")
        if entry.gpus < 1:
            raise ValueError(f"a queued request asks for at least one GPU, not {entry.gpus}")
        self._entries[entry.server] = entry

    def remove(self, server: str) -> QueueEntry | None:
        """Take a request out of line (granted, cancelled or abandoned); None if not there."""
        return self._entries.pop(server, None)

    def ordered(self, hours: Mapping[str, float]) -> list[QueueEntry]:
        """The line, first to be served first; ``hours`` are GPU-hours per user (7 days)."""

        def key(e: QueueEntry) -> tuple[float, float, str]:
            place = e.enqueued + self.fair_share_s_per_gpu_hour * hours.get(e.user, 0.0)
            return (place, e.enqueued, e.server)

        return sorted(self._entries.values(), key=key)

    def position(self, server: str, hours: Mapping[str, float]) -> int:
        """1-based place of ``server`` in line; raises KeyError if it does not wait."""
        for index, entry in enumerate(self.ordered(hours), start=1):
            if entry.server == server:
                return index
        raise KeyError(server)

    def grantable(self, free: int, hours: Mapping[str, float]) -> list[QueueEntry]:
        """Requests to serve now with ``free`` GPUs: from the head, while each one fits."""
        granted = []
        for entry in self.ordered(hours):
            if entry.gpus > free:
                break
            granted.append(entry)
            free -= entry.gpus
        return granted


def estimate_waits(
    line: Sequence[QueueEntry],
    free: int,
    held_since: Sequence[float],
    now: float,
    session_s: float,
) -> dict[str, float]:
    """Estimated seconds until each request in ``line`` gets its GPUs.

    A model, not a promise: every held GPU is assumed to come free ``session_s`` seconds after it
    was allocated (at the earliest now), and each granted request to hold its GPUs as long.

    Parameters
    ----------
    line
        The queue in order (see :meth:`GPUQueue.ordered`).
    free
        GPUs free now.
    held_since
        Allocation time (seconds since the epoch) of each held GPU, one value per GPU.
    now
        Current time, seconds since the epoch.
    session_s
        Typical time a server holds its GPUs, seconds (the maximum session length when ops set one).

    Returns
    -------
    dict
        server -> seconds (``math.inf`` when the request needs more GPUs than exist).
    """
    available = [now] * free + [max(now, since + session_s) for since in held_since]
    heapq.heapify(available)
    waits: dict[str, float] = {}
    not_before = now
    for entry in line:
        if entry.gpus > len(available):
            waits[entry.server] = math.inf
            continue
        taken = [heapq.heappop(available) for _ in range(entry.gpus)]
        start = max(max(taken), not_before)  # the head is served first: no overtaking
        not_before = start
        waits[entry.server] = start - now
        for _ in taken:
            heapq.heappush(available, start + session_s)
    return waits
