"""The hub's line of server starts (spawner/start_queue.py): turns in arrival order, places
told, nothing lost to a cancelled or timed-out wait."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from jupyterhub.objects import Hub
from jupyterhub.spawner import SpawnException
from traitlets.config import Config

from scalelab.spawner import CourseSpawnerMixin
from scalelab.spawner.gpu_pool import GPUPool
from scalelab.spawner.start_queue import Place, StartQueue, StartQueueTimeout
from tests.unit.test_spawner import _Backend


async def _hold(line: StartQueue, key: str, release: asyncio.Event, order: list[str]) -> None:
    async with line.turn(key, timeout_s=30):
        order.append(key)
        await release.wait()


def test_starts_take_turns_in_arrival_order_and_see_their_place():
    async def scenario() -> None:
        line = StartQueue(limit=2)
        order: list[str] = []
        releases = {k: asyncio.Event() for k in "abcde"}
        tasks = {}
        for key in "abcde":
            tasks[key] = asyncio.create_task(_hold(line, key, releases[key], order))
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        assert order == ["a", "b"] and line.starting == {"a", "b"}
        assert line.place("a") is None  # starting, not waiting
        assert line.place("c") == Place(position=1, length=3, starting=2, limit=2)
        assert line.place("e") == Place(position=3, length=3, starting=2, limit=2)
        releases["b"].set()
        await asyncio.sleep(0.01)
        assert order == ["a", "b", "c"] and line.starting == {"a", "c"}
        assert line.place("e") == Place(position=2, length=2, starting=2, limit=2)
        for key in "acde":
            releases[key].set()
        await asyncio.gather(*tasks.values())
        assert order == list("abcde") and line.starting == frozenset()

    asyncio.run(scenario())


def test_a_cancelled_or_timed_out_wait_leaves_the_line_and_takes_no_turn():
    async def scenario() -> None:
        line = StartQueue(limit=1)
        order: list[str] = []
        release = asyncio.Event()
        first = asyncio.create_task(_hold(line, "a", release, order))
        await asyncio.sleep(0.01)
        cancelled = asyncio.create_task(_hold(line, "b", asyncio.Event(), order))
        await asyncio.sleep(0.01)
        with pytest.raises(StartQueueTimeout) as timed_out:
            async with line.turn("c", timeout_s=0.05):
                order.append("c")
        assert timed_out.value.ahead == 2  # a started, b waited before c
        assert "after 0 s" in str(timed_out.value)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        assert line.place("b") is None and line.place("c") is None
        last = asyncio.create_task(_hold(line, "d", release, order))
        await asyncio.sleep(0.01)
        assert line.place("d") == Place(1, 1, 1, 1)
        release.set()
        await asyncio.gather(first, last)
        assert order == ["a", "d"] and line.starting == frozenset()

    asyncio.run(scenario())


def test_a_failed_start_hands_its_turn_on_and_one_server_starts_once_at_a_time():
    async def scenario() -> None:
        line = StartQueue(limit=1)
        with pytest.raises(RuntimeError):
            async with line.turn("a", timeout_s=1):
                with pytest.raises(ValueError, match="already starting"):
                    async with line.turn("a", timeout_s=1):
                        pass
                raise RuntimeError("the server exited")
        assert line.starting == frozenset()
        async with line.turn("b", timeout_s=0.05):  # at once: the failed start's turn is free
            assert line.starting == {"b"}

    asyncio.run(scenario())


def test_a_larger_limit_lets_the_first_in_line_start_at_once():
    async def scenario() -> None:
        StartQueue._shared = None
        try:
            line = StartQueue.shared(1)
            order: list[str] = []
            release = asyncio.Event()
            tasks = [asyncio.create_task(_hold(line, k, release, order)) for k in "ab"]
            await asyncio.sleep(0.01)
            assert order == ["a"]
            assert StartQueue.shared(2) is line  # the setting read again at the next start
            await asyncio.sleep(0.01)
            assert order == ["a", "b"]
            release.set()
            await asyncio.gather(*tasks)
        finally:
            StartQueue._shared = None

    asyncio.run(scenario())


class _SlowBackend(_Backend):
    """test_spawner's stand-in backend whose start ends when the test says (stands in for a
    server that takes its time to listen)."""

    listening: asyncio.Event

    async def start(self):
        await self.listening.wait()
        return await super().start()


class LinedSpawner(CourseSpawnerMixin, _SlowBackend):
    """The course layer over the slow backend."""


@pytest.fixture
def no_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(GPUPool, "_current", None)
    monkeypatch.setattr(GPUPool, "_building", None)
    monkeypatch.setattr(GPUPool, "_restores", [])
    monkeypatch.setattr(StartQueue, "_shared", None)


def _lined(tmp_path: Path, name: str, listening: asyncio.Event) -> LinedSpawner:
    c = Config()
    c.LinedSpawner.store_url = "file:///srv/course"
    c.LinedSpawner.declared_gpus = [{"uuid": "GPU-fake-0"}]
    c.LinedSpawner.gpu_queue_file = str(tmp_path / "queue.json")
    c.LinedSpawner.concurrent_starts = 1
    c.LinedSpawner.start_queue_timeout = 0.5
    c.LinedSpawner.start_timeout = 60
    user = SimpleNamespace(name=name, url=f"/user/{name}/", groups=[], admin=False)
    spawner = LinedSpawner(config=c, hub=Hub(), user=user)
    spawner.listening = listening
    return spawner


def test_a_start_that_waits_too_long_in_line_fails_saying_so_and_holds_nothing(
    tmp_path: Path, no_pool
):
    async def scenario() -> None:
        listening = asyncio.Event()
        alice, bob = (_lined(tmp_path, name, listening) for name in ("alice", "bob"))
        await alice.apply_scalelab_options({"profile": "gpu-1"})  # holds the only GPU
        bob.start_queue_timeout = 600
        await bob.apply_scalelab_options({"profile": "cpu"})
        # The hub's own timeout covers the line; the start itself keeps the configured one.
        assert bob.start_timeout == 60 + 600
        bob.start_queue_timeout = 1.5  # the progress loop looks once a second
        first = asyncio.create_task(alice.start())
        await asyncio.sleep(0.05)
        bob._spawn_pending = True  # as JupyterHub marks it (Spawner.pending)
        told = asyncio.create_task(anext(aiter(bob.progress())))
        with pytest.raises(SpawnException) as failed:
            await bob.start()
        message = failed.value.jupyterhub_message
        assert "after 2 s in line, 1 start(s) were still before yours" in message, message
        place = told.result()
        assert place["scalelab_start_queue"] == {"position": 1, "length": 1}
        assert "you are number 1 of 1 in line" in place["message"]
        ledger = (await bob.gpu_allocator()).ledger
        assert [h.server for h in ledger.holdings()] == ["alice/"]  # bob holds nothing
        assert bob.start_queue().starting == {"alice/"}
        listening.set()
        assert await first == ("127.0.0.1", 8888)

    asyncio.run(scenario())


def test_local_servers_start_twenty_at_once_and_cluster_spawners_leave_it_to_their_scheduler(
    no_pool,
):
    from scalelab.spawner import ScaleLabSpawner
    from scalelab.spawner.kube_spawner import ScaleLabKubeSpawner
    from scalelab.spawner.slurm import ScaleLabSlurmSpawner

    assert ScaleLabSpawner().concurrent_starts == 20
    assert ScaleLabSpawner().start_queue().limit == 20
    for cluster in (ScaleLabSlurmSpawner, ScaleLabKubeSpawner):
        assert cluster.concurrent_starts.default_value == 0, cluster
