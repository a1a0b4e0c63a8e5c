"""Device check on a real NVIDIA GPU: the NVML GPU source (discovery, readings, busy check),
exclusive hand-over by UUID, release check.

Run on a GPU machine (the project's device tool), from the repository root::

    python3 -m pip install --no-deps --no-build-isolation -e . && python3 bench/gpu_device_check.py

Steps, each reported in one JSON object:

1. ``scalelab.spawner.gpu_source.NVMLGPUs.discover`` lists the GPUs (``inventory``, ``names``);
2. the allocator (busy check: the source's, in a worker thread, as the hub's pool does) grants
   one GPU, and a server-like child process started with the allocation's environment
   (``CUDA_VISIBLE_DEVICES`` = the GPU's UUID) reports what PyTorch sees:
   ``child_device_count`` (must be 1) and ``uuid_match`` (its device is the granted one);
3. the source's reading of the granted GPU while the child holds 256 MiB on it
   (``reading_while_busy``: utilisation %, memory in use MiB; ``memory_seen``: at least 256);
4. while a child still holds memory on the GPU, a release quarantines it
   (``quarantined_while_busy``, with NVML's ``reason``); once the child has exited, the
   re-check returns it to the pool (``free_after_exit``).

The baseline an operator would use instead is ``CUDA_VISIBLE_DEVICES`` set by hand to a GPU
index per server, with no allocator: nothing stops two servers from being handed the same GPU,
and nothing checks that a released GPU is free. This is a correctness check, not a race; its
only timings are ``check_wall_s`` and ``check_cpu_s`` (the 20 s the child holds its GPU memory
are most of the wall time), with the load average at the start and end
(``load_avg_at_start``, ``load_avg_at_end``, ``load_avg_1m_at_start``) and the bench's own CPU
seconds (``bench_cpu_s``; the child's in ``bench_children_cpu_s``).

Without a GPU it prints ``{"inventory": 0, "reason": ...}`` (with the same load and CPU
figures) and exits 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo
from scalelab.common.gpu_source import NVMLGPUs
from scalelab.spawner.allocator import GPUAllocator
from scalelab.spawner.environment import server_environment

CHILD = """
import json, sys, time, torch
props = torch.cuda.get_device_properties(0)
held = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")  # 256 MiB
seen = {"count": torch.cuda.device_count(), "uuid": str(props.uuid), "name": props.name}
print(json.dumps(seen), flush=True)
time.sleep(float(sys.argv[1]))
"""


def _child(env: dict[str, str], hold_s: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(hold_s)],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        text=True,
    )


async def main() -> dict:
    source = NVMLGPUs()
    inventory = await asyncio.to_thread(source.discover)
    if not inventory.gpus:
        return {"inventory": 0, "reason": inventory.reason}

    async def busy_check(uuid: str) -> str | None:
        return await asyncio.to_thread(source.busy, uuid)

    alloc = GPUAllocator([g.uuid for g in inventory.gpus], busy_check=busy_check)
    holding = await alloc.acquire("check/", "check", 1)
    env = server_environment(
        store_url="file:///tmp", store_options={}, spark_master="local[*]",
        spark_driver_memory="1g", gpu_uuids=holding.gpus,
    )  # fmt: skip
    child = _child(env, hold_s=20)
    seen = json.loads(child.stdout.readline())
    granted = holding.gpus[0]
    reading = (await asyncio.to_thread(source.utilization, [granted])).get(granted)
    released = await alloc.release("check/")  # the child still holds 256 MiB
    quarantined = alloc.ledger.quarantined()
    child.wait()
    await asyncio.sleep(2)
    cleared = await alloc.recheck_quarantine()
    return {
        "inventory": len(inventory.gpus),
        "names": sorted({g.name for g in inventory.gpus}),
        "granted": granted,
        "child_device_count": seen["count"],
        "child_device": seen["name"],
        "uuid_match": granted.lower().removeprefix("gpu-")
        == seen["uuid"].lower().removeprefix("gpu-"),
        "reading_while_busy": list(reading) if reading else None,
        "memory_seen": bool(reading and reading[1] is not None and reading[1] >= 256),
        "released": list(released),
        "quarantined_while_busy": granted in quarantined,
        "reason": quarantined.get(granted),
        "free_after_exit": granted in cleared and granted in alloc.ledger.free(),
    }


if __name__ == "__main__":
    info = RunInfo()
    result = asyncio.run(main())
    figures = info.figures()
    result["check_wall_s"] = figures["bench_wall_s"]
    result["check_cpu_s"] = round(figures["bench_cpu_s"] + figures["bench_children_cpu_s"], 2)
    print(json.dumps({**result, **figures}))
