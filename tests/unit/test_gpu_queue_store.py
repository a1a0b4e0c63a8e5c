"""The GPU queue across a hub restart, without a hub: the saved file, and the allocator's
placeholders (restored requests keep their places and GPUs until started again) and the
withdrawal of requests nobody watches. GPUs are names (no GPU on this machine)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from scalelab.spawner import queue_store
from scalelab.spawner.allocator import GPUAllocator, RequestWithdrawn
from scalelab.spawner.queue import QueueEntry
from scalelab.spawner.queue_store import QueuedSpawn, QueueFileError


class Clock:
    """A clock the test moves (seconds since the epoch)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _spawn(server: str, enqueued: float, gpus: int = 1) -> QueuedSpawn:
    user = server.split("/")[0]
    return QueuedSpawn(QueueEntry(server, user, gpus, enqueued), "", {"profile": "gpu-1"})


async def _until_queued(alloc: GPUAllocator, server: str, saved: list | None = None) -> None:
    """Until ``server`` waits (and, with ``saved``, the saver has seen it)."""
    while server not in alloc._waiters or (
        saved is not None and not any(s.entry.server == server for q in saved[-1:] for s in q)
    ):
        await asyncio.sleep(0.01)


def test_file_round_trip_and_atomic_replace(tmp_path: Path):
    path = tmp_path / "gpu-queue.json"
    assert queue_store.read(path) == []  # no file: empty queue
    spawns = [_spawn("carol/", 10.0), _spawn("dave/", 20.0, gpus=2)]
    queue_store.write(path, spawns)
    assert queue_store.read(path) == spawns
    queue_store.write(path, spawns[1:])
    assert queue_store.read(path) == spawns[1:]
    assert os.listdir(tmp_path) == ["gpu-queue.json"]  # no temporary file left behind


def test_a_failed_write_leaves_the_old_file(tmp_path: Path):
    path = tmp_path / "gpu-queue.json"
    queue_store.write(path, [_spawn("carol/", 10.0)])
    bad = QueuedSpawn(QueueEntry("x/", "x", 1, 1.0), "", {"not json": object()})
    with pytest.raises(TypeError):
        queue_store.write(path, [bad])
    assert queue_store.read(path) == [_spawn("carol/", 10.0)]
    assert os.listdir(tmp_path) == ["gpu-queue.json"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('{"version": 7, "queue": []}', "version 1"),
        ('{"version": 1, "queue": [{"server": "a/"}]}', "queue[0]: \"missing 'user'\""),
        (
            json.dumps(
                {
                    "version": 1,
                    "queue": [
                        {
                            "server": "a/",
                            "user": "a",
                            "server_name": "",
                            "gpus": "1",
                            "enqueued": 1.0,
                            "user_options": {},
                        }
                    ],
                }
            ),
            "'gpus' has the wrong type (str)",
        ),
    ],
)
def test_an_unreadable_file_is_refused_with_the_problem_named(text: str, message: str):
    with pytest.raises(QueueFileError) as info:
        queue_store.loads(text)
    assert message in str(info.value)


@pytest.mark.asyncio
async def test_every_queue_change_is_saved_oldest_first():
    saved: list[list[str]] = []
    clock = Clock()
    alloc = GPUAllocator(["GPU-a"], clock=clock, saver=lambda q: saved.append(q))
    await alloc.acquire("a/", "a", 1)
    carol = asyncio.create_task(alloc.acquire("carol/", "carol", 1, user_options={"gpus": 1}))
    await _until_queued(alloc, "carol/", saved)
    clock.now += 5
    dave = asyncio.create_task(alloc.acquire("dave/", "dave", 1))
    await _until_queued(alloc, "dave/", saved)
    assert [[s.entry.server for s in q] for q in saved] == [["carol/"], ["carol/", "dave/"]]
    assert saved[-1][0].user_options == {"gpus": 1}
    await alloc.cancel("dave/")  # a student's cancel is saved
    assert [s.entry.server for s in saved[-1]] == ["carol/"]
    await alloc.release("a/")  # carol served: the saved queue is empty
    assert (await carol).gpus == ("GPU-a",)
    assert saved[-1] == []
    with pytest.raises(asyncio.CancelledError):
        await dave


@pytest.mark.asyncio
async def test_a_hub_shutdown_keeps_the_saved_queue():
    saved: list[list[QueuedSpawn]] = []
    alloc = GPUAllocator(["GPU-a"], saver=lambda q: saved.append(q))
    await alloc.acquire("a/", "a", 1)
    carol = asyncio.create_task(alloc.acquire("carol/", "carol", 1))
    await _until_queued(alloc, "carol/", saved)
    carol.cancel()  # what JupyterHub does to every task when it shuts down
    with pytest.raises(asyncio.CancelledError):
        await carol
    assert len(alloc.queue) == 0  # nothing waits in memory ...
    assert [s.entry.server for s in saved[-1]] == ["carol/"]  # ... but the file keeps her


@pytest.mark.asyncio
async def test_restored_requests_keep_their_places_and_gpus_until_started_again():
    clock = Clock()
    alloc = GPUAllocator(["GPU-a", "GPU-b"], clock=clock)
    skipped = alloc.restore_queue(
        [_spawn("carol/", clock.now - 60), _spawn("dave/", clock.now - 30), _spawn("x/", 1, 3)]
    )
    assert [(s.entry.server, why) for s, why in skipped] == [("x/", "this hub has 2 GPU(s)")]
    assert [s.entry.server for s in alloc.placeholders()] == ["carol/", "dave/"]
    # a newcomer with both GPUs free still waits behind the restored requests
    erin = asyncio.create_task(alloc.acquire("erin/", "erin", 1))
    await _until_queued(alloc, "erin/")
    assert alloc.ledger.free() == ["GPU-a", "GPU-b"]
    assert alloc.status("erin/").position == 3
    # dave's spawn comes back first, carol's second: each gets a GPU, in carol's order
    dave = await asyncio.wait_for(alloc.acquire("dave/", "dave", 1), 5)
    carol = await asyncio.wait_for(alloc.acquire("carol/", "carol", 1), 5)
    assert {dave.gpus, carol.gpus} == {("GPU-a",), ("GPU-b",)}
    assert not erin.done() and alloc.status("erin/").position == 1
    await alloc.release("carol/")
    assert (await asyncio.wait_for(erin, 5)).gpus == carol.gpus


@pytest.mark.asyncio
async def test_requests_nobody_watches_are_withdrawn_and_leave_nothing_behind():
    clock = Clock()
    saved: list[list[QueuedSpawn]] = []
    alloc = GPUAllocator(["GPU-a"], clock=clock, saver=lambda q: saved.append(q))
    alloc.restore_queue([_spawn("zed/", clock.now)])  # restored, never started again
    await alloc.acquire("a/", "a", 1)
    bob = asyncio.create_task(alloc.acquire("bob/", "bob", 1))
    carol = asyncio.create_task(alloc.acquire("carol/", "carol", 1))
    await _until_queued(alloc, "bob/")
    await _until_queued(alloc, "carol/")
    clock.now += 50
    alloc.heard_from("carol/")  # carol's pending page is open; bob closed his
    assert await alloc.withdraw_abandoned(30, 120) == ["bob/"]
    with pytest.raises(RequestWithdrawn, match="nobody watched"):
        await bob
    clock.now += 100
    alloc.heard_from("carol/")
    assert await alloc.withdraw_abandoned(30, 120) == ["zed/"]  # the placeholder's grace
    assert [s.entry.server for s in saved[-1]] == ["carol/"]
    assert await alloc.withdraw_abandoned(0, 120) == []  # 0: nobody is withdrawn
    await alloc.release("a/")
    assert (await asyncio.wait_for(carol, 5)).gpus == ("GPU-a",)
    assert alloc.ledger.holding("bob/") is None and len(alloc.queue) == 0


def test_the_hub_start_hook_does_nothing_outside_a_starting_hub():
    from scalelab.spawner.hubstart import start_with_hub

    assert start_with_hub() is False  # e.g. a checker reading jupyterhub_config.py
