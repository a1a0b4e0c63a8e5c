"""GPU inventory through NVML (nvidia-ml-py).

NVML is the NVIDIA Management Library that ``nvidia-smi`` uses; its Python binding is the
``nvidia-ml-py`` package (module ``pynvml``). Without an NVIDIA driver, ``nvmlInit`` raises
``NVMLError_LibraryNotFound`` (a ``pynvml.NVMLError``): the inventory is then empty and ScaleLab
runs CPU-only.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    """One allocatable GPU (a whole device, or later a MIG instance).

    Attributes
    ----------
    index
        NVML device index on the host (not necessarily the index a server's CUDA sees).
    uuid
        NVML UUID, e.g. ``"GPU-5c3b..."``; what ``CUDA_VISIBLE_DEVICES`` is given.
    name
        Product name, e.g. ``"NVIDIA H200"``.
    memory_mib
        Total device memory in MiB.
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
        ``"nvml"`` when discovered, or ``"none"`` when NVML is unavailable.
    reason
        Why the inventory is empty (the NVML error), or ``""``.
    """

    gpus: tuple[GPU, ...]
    source: str
    reason: str = ""


def discover_nvml() -> GPUInventory:
    """Query NVML for the host's GPUs. Blocking: call it from a thread (see :func:`discover_gpus`).

    Returns
    -------
    GPUInventory
        The GPUs found; an empty inventory with ``reason`` set when NVML is missing or fails.
        Never raises for a host without GPUs.
    """
    try:
        import pynvml
    except ImportError as exc:  # the binding is a dependency, but a broken install must not crash
        return GPUInventory((), "none", f"nvidia-ml-py is not importable ({exc})")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GPUInventory((), "none", f"NVML unavailable: {exc}")
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GPU(
                    index=index,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    memory_mib=int(memory.total) // (1024 * 1024),
                )
            )
        return GPUInventory(tuple(gpus), "nvml")
    except pynvml.NVMLError as exc:
        return GPUInventory((), "none", f"NVML query failed: {exc}")
    finally:
        pynvml.nvmlShutdown()


async def discover_gpus() -> GPUInventory:
    """:func:`discover_nvml` in a worker thread, so the hub's event loop never blocks on NVML."""
    return await asyncio.to_thread(discover_nvml)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
