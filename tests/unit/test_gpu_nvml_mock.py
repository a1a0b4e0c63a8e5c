"""NVML paths with a MOCK NVML: this machine has no NVIDIA driver, so ``MockNVML`` (a stand-in
module installed as ``pynvml``, with the calls ScaleLab makes) plays a host with one whole GPU
and one MIG-enabled GPU. Checked: MIG instances are devices of their own, a released GPU whose
memory a process still holds is quarantined until NVML shows it free, a host without a driver
gives an empty inventory, the NVML GPU source serves the hub's GPU pool (readings, quarantine),
and every NVML call runs off the hub's event-loop thread. The real NVML path is checked on a
GPU machine by ``bench/gpu_device_check.py``."""

from __future__ import annotations

import asyncio
import sys
import threading
import types
from dataclasses import dataclass

import pytest
from traitlets.config import Config

from scalelab.common.gpu_inventory import discover_gpus, nvml_busy, nvml_processes
from scalelab.common.gpu_source import NVMLGPUs
from scalelab.spawner import ScaleLabSpawner
from scalelab.spawner.allocator import GPUAllocator
from scalelab.spawner.gpu_pool import GPUPool

MIB = 1024 * 1024


@dataclass
class _Memory:
    total: int
    used: int = 0


@dataclass
class _Utilization:
    gpu: int


@dataclass
class _Process:
    pid: int
    usedGpuMemory: int


class MockNVML(types.ModuleType):
    """A mock of ``pynvml`` (nvidia-ml-py): devices, MIG instances and processes the test sets.

    ``threads`` records the thread of every call, ``processes[uuid]`` the processes holding
    memory on a device, and ``driver`` False makes ``nvmlInit`` fail as on a host without GPUs.
    """

    NVML_DEVICE_MIG_ENABLE = 1

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.threads: set[int] = set()
        self.driver = True
        self.processes: dict[str, list[_Process]] = {}
        self.utilization: dict[str, int] = {}
        # host index -> (name, uuid, MIG on, MIG slots: uuid or None for an empty slot)
        self.devices = [
            ("NVIDIA H200", "GPU-mock-0", False, []),
            ("NVIDIA H200", "GPU-mock-1", True, ["MIG-mock-1a", None, "MIG-mock-1c"]),
        ]

    def _call(self) -> None:
        self.threads.add(threading.get_ident())

    def nvmlInit(self) -> None:
        self._call()
        if not self.driver:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self._call()

    def nvmlDeviceGetCount(self) -> int:
        self._call()
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self._call()
        return self.devices[index][1]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self._call()
        return uuid

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        self._call()
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        self._call()
        return handle

    def nvmlDeviceGetMigMode(self, handle: str) -> tuple[int, int]:
        self._call()
        mig = next(d[2] for d in self.devices if d[1] == handle)
        return (1, 1) if mig else (0, 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: str) -> int:
        self._call()
        return len(next(d[3] for d in self.devices if d[1] == handle))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: str, index: int) -> str:
        self._call()
        slot = next(d[3] for d in self.devices if d[1] == handle)[index]
        if slot is None:
            raise self.NVMLError("Not Found")
        return slot

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> _Memory:
        self._call()
        held = sum(p.usedGpuMemory for p in self.processes.get(handle, []))
        return _Memory(total=(143771 if handle.startswith("GPU") else 71 * 1024) * MIB, used=held)

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> _Utilization:
        self._call()
        if handle.startswith("MIG"):
            raise self.NVMLError("Not Supported")  # MIG instances report none of their own
        return _Utilization(gpu=self.utilization.get(handle, 0))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[_Process]:
        self._call()
        return list(self.processes.get(handle, []))

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: str) -> list[_Process]:
        self._call()
        return []


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> MockNVML:
    mock = MockNVML()
    monkeypatch.setitem(sys.modules, "pynvml", mock)
    return mock


@pytest.mark.asyncio
async def test_discovery_lists_whole_gpus_and_each_mig_instance_off_the_event_loop(nvml):
    inventory = await discover_gpus()
    assert inventory.source == "nvml"
    assert [(g.index, g.uuid, g.memory_mib) for g in inventory.gpus] == [
        (0, "GPU-mock-0", 143771),
        (1, "MIG-mock-1a", 71 * 1024),
        (1, "MIG-mock-1c", 71 * 1024),
    ]
    assert "3 GPU(s) found by NVML" in inventory.describe()
    assert nvml.threads and threading.get_ident() not in nvml.threads


@pytest.mark.asyncio
async def test_a_released_gpu_still_holding_memory_is_quarantined_until_free(nvml):
    alloc = GPUAllocator(["GPU-mock-0"], busy_check=nvml_busy)
    await alloc.acquire("alice/", "alice", 1)
    nvml.processes["GPU-mock-0"] = [_Process(4242, 1536 * MIB)]  # her kernel lingers
    await alloc.release("alice/")
    assert alloc.ledger.quarantined() == {
        "GPU-mock-0": "released by alice/, but NVML shows pid 4242 holds 1536 MiB"
    }
    assert alloc.ledger.free() == []
    assert await alloc.recheck_quarantine() == []  # still there
    nvml.processes["GPU-mock-0"] = []
    assert await alloc.recheck_quarantine() == ["GPU-mock-0"]
    assert (await alloc.acquire("bob/", "bob", 1)).gpus == ("GPU-mock-0",)
    assert threading.get_ident() not in nvml.threads


@pytest.mark.asyncio
async def test_without_a_driver_the_inventory_is_empty_and_nothing_counts_as_busy(nvml):
    nvml.driver = False
    inventory = await discover_gpus()
    assert inventory.gpus == () and inventory.source == "none"
    assert "no GPU: servers run CPU-only (NVML unavailable: Driver Not Loaded)" in (
        inventory.describe()
    )
    assert nvml_processes("GPU-mock-0") is None


@pytest.mark.asyncio
async def test_the_nvml_source_serves_the_pool_off_the_event_loop(
    nvml, tmp_path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(GPUPool, "_current", None)
    monkeypatch.setattr(GPUPool, "_building", None)
    monkeypatch.setattr(GPUPool, "_restores", [])
    c = Config()
    c.ScaleLabSpawner.gpu_queue_file = str(tmp_path / "queue.json")
    spawner = ScaleLabSpawner(config=c)
    assert type(spawner.make_gpu_source()) is NVMLGPUs  # no declared GPUs: NVML
    pool = await GPUPool.ensure(spawner)
    try:
        assert pool.inventory.source == "nvml"
        assert pool.allocator.ledger.inventory == ("GPU-mock-0", "MIG-mock-1a", "MIG-mock-1c")
        nvml.utilization["GPU-mock-0"] = 87
        nvml.processes["GPU-mock-0"] = [_Process(4242, 2048 * MIB)]
        # MIG instances report no utilisation: unknown, left out
        assert await pool.readings() == {"GPU-mock-0": (87, 2048)}
        await pool.allocator.acquire("alice/", "alice", 1)
        await pool.allocator.release("alice/")  # her process lingers: quarantined
        assert pool.allocator.ledger.quarantined() == {
            "GPU-mock-0": "released by alice/, but NVML shows pid 4242 holds 2048 MiB"
        }
        assert threading.get_ident() not in nvml.threads
    finally:  # the pool's background task ends with the test
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
