"""GPU inventory: discovered through NVML (nvidia-ml-py), or declared in the configuration.

Without an NVIDIA driver the inventory is empty (CPU only); with MIG on, each MIG instance is a
device of its own (``MIG-...`` UUID). Every NVML call here blocks: the hub runs them in a worker
thread (:func:`discover_gpus`, :func:`nvml_busy`, or through its GPU source).
Why: docs/design-notes.md, scalelab.common.gpu_inventory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_MIB = 1024 * 1024


@dataclass(frozen=True)
class GPU:
    """One allocatable GPU: a whole device or a MIG instance.

    Attributes
    ----------
    index
        NVML device index on the host (of the parent device for a MIG instance); not
        necessarily the index a server's CUDA sees.
    uuid
        NVML UUID, ``"GPU-..."`` or ``"MIG-..."``; what ``CUDA_VISIBLE_DEVICES`` is given.
    name
        Product name, e.g. ``"NVIDIA H200"``.
    memory_mib
        Device (or instance) memory in MiB.
    """

    index: int
    uuid: str
    name: str
    memory_mib: int


@dataclass(frozen=True)
class GPUInventory:
    """The GPUs a hub may hand out, and where that list came from.

    Attributes
    ----------
    gpus
        The devices, in NVML index order.
    source
        ``"nvml"`` (discovered), ``"declared"`` (from ``ScaleLabSpawner.declared_gpus``: no
        NVML check is made on them), ``"slurm"`` (the GRES of a Slurm cluster's nodes), or
        ``"none"`` (NVML unavailable).
    reason
        Why the inventory is empty (the NVML error), or ``""``.
    """

    gpus: tuple[GPU, ...]
    source: str
    reason: str = ""

    def describe(self) -> str:
        """One log line: what was found, from where."""
        if not self.gpus:
            return f"no GPU: servers run CPU-only ({self.reason or self.source})"
        names = ", ".join(f"{g.index}: {g.name} {g.memory_mib} MiB ({g.uuid})" for g in self.gpus)
        kind = {
            "declared": "DECLARED in the configuration, not checked by NVML",
            "slurm": "declared to Slurm as GRES on the cluster's nodes",
        }.get(self.source, "found by NVML")
        return f"{len(self.gpus)} GPU(s) {kind}: {names}"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _devices(pynvml: Any, index: int, handle: Any) -> list[GPU]:
    """The allocatable devices of one physical GPU: itself, or its MIG instances."""
    name = _text(pynvml.nvmlDeviceGetName(handle))
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError:  # not MIG-capable
        current = 0
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // _MIB
        return [GPU(index, _text(pynvml.nvmlDeviceGetUUID(handle)), name, int(memory))]
    instances = []
    for mig_index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, mig_index)
        except pynvml.NVMLError:  # an empty slot
            continue
        memory = pynvml.nvmlDeviceGetMemoryInfo(mig).total // _MIB
        uuid = _text(pynvml.nvmlDeviceGetUUID(mig))
        instances.append(GPU(index, uuid, f"{name} MIG {mig_index}", int(memory)))
    return instances


def discover_nvml() -> GPUInventory:
    """Query NVML for the host's GPUs (MIG instances as separate devices). Blocking.

    Returns
    -------
    GPUInventory
        The GPUs found; an empty inventory with ``reason`` set when NVML is missing or fails.
        Never raises for a host without GPUs.
    """
    try:
        import pynvml
    except ImportError as exc:  # a dependency, but a broken install must not crash the hub
        return GPUInventory((), "none", f"nvidia-ml-py is not importable ({exc})")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GPUInventory((), "none", f"NVML unavailable: {exc}")
    try:
        gpus: list[GPU] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            gpus.extend(_devices(pynvml, index, pynvml.nvmlDeviceGetHandleByIndex(index)))
        return GPUInventory(tuple(gpus), "nvml")
    except pynvml.NVMLError as exc:
        return GPUInventory((), "none", f"NVML query failed: {exc}")
    finally:
        pynvml.nvmlShutdown()


def declared_inventory(entries: Sequence[Mapping[str, Any]]) -> GPUInventory:
    """An inventory from ``ScaleLabSpawner.declared_gpus`` (tests, hosts NVML cannot see).

    Parameters
    ----------
    entries
        ``[{"uuid": "GPU-test-0", "name": "declared test GPU", "memory_mib": 81920}, ...]``;
        ``name`` and ``memory_mib`` are optional.

    Raises
    ------
    ValueError
        An entry without a ``uuid``, with an unknown key, or a UUID declared twice.
    """
    allowed = {"uuid", "name", "memory_mib"}
    gpus = []
    for index, entry in enumerate(entries):
        where = f"ScaleLabSpawner.declared_gpus[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a dict like {{'uuid': 'GPU-...'}}, not {entry!r}")
        unknown = sorted(set(entry) - allowed)
        if unknown:
            raise ValueError(f"{where} has unknown key(s) {unknown}; allowed: {sorted(allowed)}")
        if not isinstance(entry.get("uuid"), str) or not entry["uuid"]:
            raise ValueError(f"{where} needs a 'uuid' (a non-empty string)")
        gpus.append(
            GPU(
                index,
                entry["uuid"],
                str(entry.get("name", "declared GPU")),
                int(entry.get("memory_mib", 0)),
            )
        )
    uuids = [g.uuid for g in gpus]
    if len(set(uuids)) != len(uuids):
        raise ValueError(f"ScaleLabSpawner.declared_gpus names a UUID twice: {uuids}")
    return GPUInventory(tuple(gpus), "declared")


def exclude(inventory: GPUInventory, excluded: Iterable[str]) -> GPUInventory:
    """The inventory without the GPUs named in ``excluded`` (UUIDs, or host indices as text)."""
    excluded = set(excluded)
    kept = tuple(
        g for g in inventory.gpus if g.uuid not in excluded and str(g.index) not in excluded
    )
    return GPUInventory(kept, inventory.source, inventory.reason)


def slurm_gpu_id(node: str, index: int | str) -> str:
    """The name of GRES GPU ``index`` of Slurm node ``node`` (pure): ``"n1/gpu0"``, as the hub's
    ledger and GPU board name it and as a server in a Slurm job names its own GPUs."""
    return f"{node}/gpu{index}"


async def discover_gpus() -> GPUInventory:
    """:func:`discover_nvml` in a worker thread, so the hub's event loop never blocks on NVML."""
    return await asyncio.to_thread(discover_nvml)


def nvml_processes(uuid: str) -> str | None:
    """Processes holding memory on a GPU, as one line, or None when there are none. Blocking.

    Returns None as well when NVML cannot be asked (no driver): nothing proves the GPU busy.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 -- no binding, no driver: nothing can be told
        return None
    try:
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        procs = [
            *pynvml.nvmlDeviceGetComputeRunningProcesses(handle),
            *pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle),
        ]
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()
    if not procs:
        return None
    held = ", ".join(f"pid {p.pid} holds {(p.usedGpuMemory or 0) // _MIB} MiB" for p in procs)
    return f"NVML shows {held}"


def nvml_utilization(uuids: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Utilisation (%, over NVML's last sample period) and memory used (MiB) per GPU. Blocking.

    Returns
    -------
    dict
        uuid -> (gpu_percent, memory_used_mib), for the GPUs NVML could read (none without NVML;
        MIG instances report no utilisation of their own and are left out).
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 -- no binding, no driver: nothing to report
        return {}
    readings = {}
    try:
        for uuid in uuids:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
                util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
                used = pynvml.nvmlDeviceGetMemoryInfo(handle).used // _MIB
            except pynvml.NVMLError:
                continue
            readings[uuid] = (int(util), int(used))
    finally:
        pynvml.nvmlShutdown()
    return readings


async def nvml_busy(uuid: str) -> str | None:
    """:func:`nvml_processes` in a worker thread (the allocator's busy check on real GPUs)."""
    return await asyncio.to_thread(nvml_processes, uuid)
