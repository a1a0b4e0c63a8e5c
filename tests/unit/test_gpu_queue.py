"""Table tests of the GPU queue: fair order, positions, what can be served, estimated waits."""

from __future__ import annotations

import math

import pytest

from scalelab.spawner.queue import GPUQueue, QueueEntry, Usage, estimate_waits, gpu_hours

HOUR = 3600.0


def _queue(*entries: tuple[str, int, float]) -> GPUQueue:
    queue = GPUQueue(fair_share_s_per_gpu_hour=60.0)
    for user, gpus, at in entries:
        queue.add(QueueEntry(f"{user}/", user, gpus, at))
    return queue


@pytest.mark.parametrize(
    ("entries", "hours", "order"),
    [
        # first come, first served
        ([("a", 1, 0.0), ("b", 1, 10.0), ("c", 1, 20.0)], {}, ["a", "b", "c"]),
        # close arrivals: the lighter user first (b used 0.5 h = 30 s back; a used 2 h = 120 s back)
        ([("a", 1, 0.0), ("b", 1, 10.0)], {"a": 2.0, "b": 0.5}, ["b", "a"]),
        # far arrivals: first come still wins over a usage difference
        ([("a", 1, 0.0), ("b", 1, 600.0)], {"a": 2.0}, ["a", "b"]),
        # equal places: earlier arrival, then server name
        ([("b", 1, 60.0), ("a", 1, 0.0)], {"a": 1.0}, ["a", "b"]),
    ],
)
def test_fair_order(entries, hours, order):
    queue = _queue(*entries)
    assert [e.user for e in queue.ordered(hours)] == order
    assert [queue.position(f"{u}/", hours) for u in order] == list(range(1, len(order) + 1))


def test_head_of_line_is_not_overtaken_by_a_smaller_request():
    queue = _queue(("a", 2, 0.0), ("b", 1, 1.0))
    assert queue.grantable(free=1, hours={}) == []
    assert [e.user for e in queue.grantable(free=3, hours={})] == ["a", "b"]


def test_add_twice_or_zero_gpus_is_refused_and_remove_is_idempotent():
    queue = _queue(("a", 1, 0.0))
    with pytest.raises(ValueError, match="already waiting"):
        queue.add(QueueEntry("a/", "a", 1, 5.0))
    with pytest.raises(ValueError, match="at least one GPU"):
        queue.add(QueueEntry("b/", "b", 0, 5.0))
    assert queue.remove("a/") is not None
    assert queue.remove("a/") is None
    assert len(queue) == 0 and "a/" not in queue


def test_gpu_hours_count_only_the_last_seven_days_and_ongoing_use():
    now = 10 * 24 * HOUR
    usage = [
        Usage("a", 2, start=now - 8 * 24 * HOUR, end=now - 8 * 24 * HOUR + HOUR),  # too old
        Usage("a", 1, start=now - 7 * 24 * HOUR - HOUR, end=now - 7 * 24 * HOUR + HOUR),  # half in
        Usage("b", 4, start=now - 0.5 * HOUR),  # ongoing
    ]
    assert gpu_hours(usage, now) == pytest.approx({"a": 1.0, "b": 2.0})


def test_estimated_waits_follow_the_holdings_and_the_line():
    now = 1000.0
    line = [
        QueueEntry("a/", "a", 1, 0.0),
        QueueEntry("b/", "b", 2, 1.0),
        QueueEntry("c/", "c", 9, 2.0),
    ]
    # Two GPUs held: one since 600 s ago, one since 100 s ago; sessions last 1,000 s.
    waits = estimate_waits(line, free=0, held_since=[now - 600, now - 100], now=now, session_s=1000)
    assert waits["a/"] == pytest.approx(400)  # the older GPU frees first
    assert waits["b/"] == pytest.approx(1400)  # needs the second GPU (900 s) and a's (1,400 s)
    assert waits["c/"] == math.inf  # more GPUs than exist
    assert estimate_waits(line[:1], free=1, held_since=[], now=now, session_s=1000) == {"a/": 0.0}
