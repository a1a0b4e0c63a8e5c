"""The hub's GPU allocator on an event loop: waiting, granting, cancelling, quarantine.

GPUs here are a declared inventory of names (no GPU on this machine); the NVML busy check is
replaced by ``FakeBusyCheck``, a named stand-in whose answers the test sets.
"""

from __future__ import annotations

import asyncio

import pytest

from scalelab.spawner.allocator import GPUAllocator
from scalelab.spawner.ledger import Holding, LedgerError
from scalelab.spawner.policy import LimitRule, PolicyError

pytestmark = pytest.mark.asyncio


class FakeBusyCheck:
    """Stands in for NVML's per-GPU process list: ``busy[uuid]`` is the reason, if any."""

    def __init__(self) -> None:
        self.busy: dict[str, str] = {}

    async def __call__(self, uuid: str) -> str | None:
        return self.busy.get(uuid)


async def _until_queued(alloc: GPUAllocator, server: str) -> None:
    while alloc.status(server) is None:
        await asyncio.sleep(0)


async def test_waiting_request_gets_the_gpu_released_by_another():
    alloc = GPUAllocator(["GPU-a", "GPU-b"])
    a = await alloc.acquire("a/", "a", 1)
    b = await alloc.acquire("b/", "b", 1)
    assert {a.gpus, b.gpus} == {("GPU-a",), ("GPU-b",)}
    waiting = asyncio.create_task(alloc.acquire("c/", "c", 1))
    await _until_queued(alloc, "c/")
    assert alloc.status("c/").position == 1
    await alloc.release("b/")
    c = await asyncio.wait_for(waiting, 5)
    assert c.gpus == ("GPU-b",)
    assert alloc.status("c/") is None


async def test_cancelled_wait_leaves_nothing_behind():
    alloc = GPUAllocator(["GPU-a"])
    await alloc.acquire("a/", "a", 1)
    waiting = asyncio.create_task(alloc.acquire("b/", "b", 1))
    await _until_queued(alloc, "b/")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert len(alloc.queue) == 0
    await alloc.release("a/")
    assert alloc.ledger.free() == ["GPU-a"]
    assert (await alloc.acquire("b/", "b", 1)).gpus == ("GPU-a",)  # free to start again


async def test_grant_racing_a_cancel_gives_the_gpu_back():
    alloc = GPUAllocator(["GPU-a"])
    await alloc.acquire("a/", "a", 1)
    waiting = asyncio.create_task(alloc.acquire("b/", "b", 1))
    await _until_queued(alloc, "b/")
    await alloc.release("a/")  # grants GPU-a to b/ ...
    waiting.cancel()  # ... but the spawn is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert alloc.ledger.holding("b/") is None
    assert alloc.ledger.free() == ["GPU-a"]


async def test_limits_refuse_before_anything_is_queued():
    alloc = GPUAllocator(["GPU-a", "GPU-b", "GPU-c"], [LimitRule("course limit", per_user=2)])
    await alloc.acquire("a/", "a", 2)
    with pytest.raises(PolicyError, match="you may hold at most 2") as info:
        await alloc.acquire("a/second", "a", 1)
    assert info.value.status == 409
    with pytest.raises(PolicyError, match="this hub has 3 in all"):
        await alloc.acquire("b/", "b", 4)
    assert len(alloc.queue) == 0
    assert alloc.ledger.free() == ["GPU-c"]


async def test_a_gpu_still_in_use_is_quarantined_until_free():
    busy = FakeBusyCheck()
    alloc = GPUAllocator(["GPU-a"], busy_check=busy)
    await alloc.acquire("a/", "a", 1)
    busy.busy["GPU-a"] = "pid 4242 holds 1536 MiB"
    waiting = asyncio.create_task(alloc.acquire("b/", "b", 1))
    await _until_queued(alloc, "b/")
    await alloc.release("a/")
    assert alloc.ledger.quarantined() == {"GPU-a": "released by a/, but pid 4242 holds 1536 MiB"}
    assert not waiting.done()
    del busy.busy["GPU-a"]
    assert await alloc.recheck_quarantine() == ["GPU-a"]
    assert (await asyncio.wait_for(waiting, 5)).gpus == ("GPU-a",)


async def test_restore_after_restart_keeps_the_holder():
    alloc = GPUAllocator(["GPU-a", "GPU-b"])
    await alloc.restore(Holding("a/", "a", ("GPU-b",), since=100.0))
    assert (await alloc.acquire("b/", "b", 1)).gpus == ("GPU-a",)
    with pytest.raises(LedgerError, match="held by a/"):
        await alloc.restore(Holding("c/", "c", ("GPU-b",), since=1.0))


async def test_light_user_goes_first_among_close_arrivals():
    now = [1000.0]
    alloc = GPUAllocator(["GPU-a"], clock=lambda: now[0], fair_share_s_per_gpu_hour=60.0)
    await alloc.acquire("heavy/", "heavy", 1)
    now[0] += 3 * 3600  # heavy has used 3 GPU-hours by now
    tasks = [asyncio.create_task(alloc.acquire("heavy/2", "heavy", 1))]
    await _until_queued(alloc, "heavy/2")
    now[0] += 10
    tasks.append(asyncio.create_task(alloc.acquire("light/", "light", 1)))
    await _until_queued(alloc, "light/")
    assert alloc.status("light/").position == 1 and alloc.status("heavy/2").position == 2
    await alloc.release("heavy/")
    assert (await asyncio.wait_for(tasks[1], 5)).gpus == ("GPU-a",)
    assert not tasks[0].done()
    tasks[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]


async def test_a_gpu_taken_over_by_the_schedulers_record_counts_its_hours_up_to_then():
    now = [0.0]
    alloc = GPUAllocator(["GPU-a", "GPU-b"], clock=lambda: now[0])
    await alloc.acquire("s1/", "s1", 1)
    now[0] = 1800.0  # half an hour later Slurm has started s5's job on s1's GPU
    taken = await alloc.take_over(Holding("s5/", "s5", ("GPU-a",), 1800.0))
    assert taken == {"s1/": ("GPU-a",)}
    now[0] = 3600.0
    assert await alloc.release("s1/") == ()  # s1's poll: nothing of s5's is freed
    assert alloc.ledger.holder("GPU-a") == "s5/"
    assert alloc.gpu_hours() == {"s1": 0.5, "s5": 0.5}
