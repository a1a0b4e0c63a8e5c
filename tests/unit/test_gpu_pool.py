"""The hub's one GPU pool and its pluggable GPU source, in-process: which source a spawner's
settings select, the pool built once for concurrent first users, holdings from saved state put
back, readings from the source (declared GPUs: unknown; the test source: its file) and the GPU
board's model of them."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from prometheus_client import REGISTRY
from traitlets.config import Config

from scalelab.common.gpu_source import DeclaredGPUs, NVMLGPUs, source_class
from scalelab.common.strictconfig import UnknownSettingError
from scalelab.hub_ext.hub.gpu_board import board_model
from scalelab.spawner import ScaleLabSpawner
from scalelab.spawner.gpu_pool import GPUPool
from scalelab.spawner.ledger import Holding
from tests.support.fake_gpus import FAILING_PATH, IMPORT_PATH, FailingGPUs, FileReadingsGPUs

TWO = [{"uuid": "GPU-fake-0", "memory_mib": 1024}, {"uuid": "GPU-fake-1"}]


def _spawner(tmp_path: Path, **settings) -> ScaleLabSpawner:
    c = Config()
    c.ScaleLabSpawner.gpu_queue_file = str(tmp_path / "queue.json")
    for key, value in settings.items():
        section, _, name = key.rpartition("__")
        setattr(c[section or "ScaleLabSpawner"], name, value)
    return ScaleLabSpawner(config=c)


@pytest_asyncio.fixture
async def no_pool(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """A hub process with no GPU pool yet; the pool's background task ends with the test."""
    monkeypatch.setattr(GPUPool, "_current", None)
    monkeypatch.setattr(GPUPool, "_building", None)
    monkeypatch.setattr(GPUPool, "_restores", [])
    monkeypatch.setattr(GPUPool, "_spark_restores", [])
    yield
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def test_the_source_is_declared_when_gpus_are_declared_else_nvml(tmp_path: Path):
    assert source_class(None, declared=True) is DeclaredGPUs
    assert source_class(None, declared=False) is NVMLGPUs
    assert source_class(FileReadingsGPUs, declared=False) is FileReadingsGPUs
    assert type(_spawner(tmp_path).make_gpu_source()) is NVMLGPUs
    declared = _spawner(tmp_path, declared_gpus=TWO).make_gpu_source()
    assert type(declared) is DeclaredGPUs
    assert [g.uuid for g in declared.discover().gpus] == ["GPU-fake-0", "GPU-fake-1"]


def test_declared_gpus_are_never_busy_and_their_readings_unknown():
    source = DeclaredGPUs(declared=TWO)
    inventory = source.discover()
    assert inventory.source == "declared"
    assert "DECLARED in the configuration" in inventory.describe()
    assert source.busy("GPU-fake-0") is None
    assert source.utilization(["GPU-fake-0", "GPU-fake-1"]) == {}


def test_a_source_class_is_chosen_by_import_path_and_has_its_own_settings(tmp_path: Path):
    readings = tmp_path / "readings.json"
    source = _spawner(
        tmp_path,
        declared_gpus=TWO,
        gpu_source_class=IMPORT_PATH,
        FileReadingsGPUs__readings_file=str(readings),
    ).make_gpu_source()
    assert type(source) is FileReadingsGPUs
    assert source.readings_file == str(readings)
    assert [g.uuid for g in source.discover().gpus] == ["GPU-fake-0", "GPU-fake-1"]
    with pytest.raises(UnknownSettingError, match=r"c\.FileReadingsGPUs has unknown setting"):
        _spawner(
            tmp_path, gpu_source_class=IMPORT_PATH, FileReadingsGPUs__readings=""
        ).make_gpu_source()


@pytest.mark.asyncio
async def test_the_pool_is_built_once_for_concurrent_first_users(tmp_path: Path, no_pool):
    assert GPUPool.current() is None
    first, second = _spawner(tmp_path, declared_gpus=TWO), _spawner(tmp_path, declared_gpus=TWO)
    allocators = await asyncio.gather(first.gpu_allocator(), second.gpu_allocator())
    pool = GPUPool.current()
    assert pool is not None
    assert allocators[0] is allocators[1] is pool.allocator
    assert await GPUPool.ensure(_spawner(tmp_path)) is pool  # later settings change nothing
    assert [g.uuid for g in pool.inventory.gpus] == ["GPU-fake-0", "GPU-fake-1"]
    assert type(pool.source) is DeclaredGPUs
    assert pool.policy.max_gpus_per_user == 4
    assert json.loads((tmp_path / "queue.json").read_text())["queue"] == []


@pytest.mark.asyncio
async def test_excluded_gpus_are_not_in_the_pool(tmp_path: Path, no_pool):
    pool = await GPUPool.ensure(_spawner(tmp_path, declared_gpus=TWO, exclude_gpus=["1"]))
    assert pool.allocator.ledger.inventory == ("GPU-fake-0",)


@pytest.mark.asyncio
async def test_holdings_from_saved_state_go_in_before_and_after_the_pool_is_built(
    tmp_path: Path, no_pool
):
    spawner = _spawner(tmp_path, declared_gpus=TWO)
    GPUPool.restore(Holding("alice/", "alice", ("GPU-fake-0",), 1000.0), spawner.log)
    pool = await GPUPool.ensure(spawner)
    assert pool.allocator.ledger.holding("alice/").gpus == ("GPU-fake-0",)
    GPUPool.restore(Holding("bob/", "bob", ("GPU-fake-1",), 2000.0), spawner.log)
    assert pool.allocator.ledger.holding("bob/").gpus == ("GPU-fake-1",)
    assert pool.allocator.ledger.free() == []


@pytest.mark.asyncio
async def test_ensure_for_builds_the_pool_from_a_spawner_class_and_the_config(
    tmp_path: Path, no_pool
):
    c = Config()
    c.ScaleLabSpawner.declared_gpus = TWO
    c.ScaleLabSpawner.gpu_queue_file = ""
    pool = await GPUPool.ensure_for(ScaleLabSpawner, c)
    assert GPUPool.current() is pool and len(pool.inventory.gpus) == 2


@pytest.mark.asyncio
async def test_ensure_for_a_spawner_without_gpu_settings_is_refused(no_pool):
    from jupyterhub.spawner import LocalProcessSpawner

    with pytest.raises(TypeError, match="has no ScaleLab GPU settings"):
        await GPUPool.ensure_for(LocalProcessSpawner, Config())
    assert GPUPool.current() is None


@pytest.mark.asyncio
async def test_readings_come_from_the_source_off_the_event_loop_and_reach_the_board(
    tmp_path: Path, no_pool, monkeypatch: pytest.MonkeyPatch
):
    readings = tmp_path / "readings.json"
    readings.write_text(json.dumps({"GPU-fake-0": 90, "GPU-other": 1}))
    spawner = _spawner(
        tmp_path,
        declared_gpus=TWO,
        gpu_source_class=IMPORT_PATH,
        FileReadingsGPUs__readings_file=str(readings),
    )
    pool = await GPUPool.ensure(spawner)
    threads: set[int] = set()
    read = FileReadingsGPUs.utilization

    def watched(self, uuids):
        threads.add(threading.get_ident())
        return read(self, uuids)

    monkeypatch.setattr(FileReadingsGPUs, "utilization", watched)
    got = await pool.readings()
    assert got == {"GPU-fake-0": (90.0, None)}  # GPU-fake-1: unknown; GPU-other: not ours
    assert threads and threading.get_ident() not in threads
    board = board_model(pool.allocator, pool.inventory, got, pool.allocator.clock())
    assert board["source"] == "declared"
    assert [(g["uuid"], g["utilization_pct"], g["memory_used_mib"]) for g in board["gpus"]] == [
        ("GPU-fake-0", 90.0, None),
        ("GPU-fake-1", None, None),
    ]


def _source_errors(call: str) -> float:
    return REGISTRY.get_sample_value("scalelab_gpu_source_errors_total", {"call": call}) or 0.0


@pytest.mark.asyncio
async def test_a_gpu_source_that_raises_leaves_its_gpus_unknown_and_nothing_else_fails(
    tmp_path: Path, no_pool, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(FailingGPUs, "failing", True)
    pool = await GPUPool.ensure(
        _spawner(tmp_path, declared_gpus=TWO, gpu_source_class=FAILING_PATH)
    )
    before = _source_errors("utilization"), _source_errors("busy")
    assert await pool.readings() == {}  # every GPU unknown, no exception
    problem = "FailingGPUs failed: RuntimeError: NVML: Driver/library version mismatch"
    assert pool.readings_problem == problem
    board = board_model(
        pool.allocator, pool.inventory, {}, pool.allocator.clock(), pool.readings_problem
    )
    assert board["readings_problem"] == problem
    assert [g["utilization_pct"] for g in board["gpus"]] == [None, None]
    # A release while the source cannot check the GPU keeps it out, with the reason: never
    # handed to the next student on a guess.
    holding = await pool.allocator.acquire("alice/", "alice", 1)
    await pool.allocator.release("alice/")
    (gpu,) = holding.gpus
    reason = pool.allocator.ledger.quarantined()[gpu]
    assert "the GPU source could not check it (RuntimeError: NVML" in reason
    assert _source_errors("utilization") == before[0] + 1
    assert _source_errors("busy") == before[1] + 1
    # The source recovers: readings are back, the problem gone, the GPU free again.
    monkeypatch.setattr(FailingGPUs, "failing", False)
    assert await pool.readings() == {"GPU-fake-0": (5.0, None), "GPU-fake-1": (5.0, None)}
    assert pool.readings_problem is None
    assert await pool.allocator.recheck_quarantine() == [gpu]


@pytest.mark.asyncio
async def test_declared_gpus_read_nothing_so_the_board_shows_them_unknown(tmp_path: Path, no_pool):
    pool = await GPUPool.ensure(_spawner(tmp_path, declared_gpus=TWO))
    board = board_model(pool.allocator, pool.inventory, await pool.readings(), 0.0)
    assert [g["utilization_pct"] for g in board["gpus"]] == [None, None]


def test_an_unreadable_readings_file_is_unknown_not_idle(tmp_path: Path):
    source = FileReadingsGPUs(declared=TWO, readings_file=str(tmp_path / "missing.json"))
    assert source.utilization(["GPU-fake-0"]) == {}
    (tmp_path / "broken.json").write_text("{not json")
    source.readings_file = str(tmp_path / "broken.json")
    assert source.utilization(["GPU-fake-0"]) == {}


@pytest.mark.asyncio
async def test_the_board_lists_spark_applications_cluster_gpus_apart_from_the_gpus(
    tmp_path: Path, no_pool
):
    pool = await GPUPool.ensure(_spawner(tmp_path, declared_gpus=TWO))
    await pool.allocator.grant_spark("alice/", "alice", "train-42", 3)
    board = board_model(pool.allocator, pool.inventory, {}, 0.0)
    assert [(a["server"], a["user"], a["application"], a["gpus"]) for a in board["spark"]] == [
        ("alice/", "alice", "train-42", 3)
    ]
    assert board["spark"][0]["since"].endswith("+00:00")
    assert all(g["holder"] is None for g in board["gpus"])  # the cluster's GPUs, not the hub's
