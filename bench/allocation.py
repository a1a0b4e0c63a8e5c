"""Benchmark: ScaleLab's GPU allocator under 1,000 concurrent simulated requests.

For each inventory size (8 and 64 GPUs), 1,000 requests from 100 users with the same workload
(1 or 2 GPUs, held for an exponential time of mean 30 min) arrive over 10 simulated minutes
and go through :class:`scalelab.spawner.allocator.GPUAllocator` on one event loop. Time is
simulated (the allocator's clock), so the figures do not depend on waiting.

Prints one JSON object with, per inventory size:

- ``double_allocations``: grants of a GPU that another request still held (must be 0), checked
  by a tracker independent of the ledger;
- ``decisions_per_s``: allocator calls (acquire, release with its dispatch) per wall-clock second;
- ``p99_decision_ms``: 99th percentile wall-clock time of one call;
- ``jain_fairness``: with ScaleLab's default fair share (``fair_share_s_per_gpu_hour``, 300 s),
  Jain's index (sum x)^2 / (n sum x^2) of the GPU-hours each user received up
  to the median completion time (1.0: perfectly even; Jain, Chiu & Hawe, DEC-TR-301, 1984);
- ``jain_fairness_fcfs``: the same with fair share off (plain first come, first served), the
  baseline measured in the same run;
- ``mean_wait_min``: mean simulated wait in the queue, minutes;
- ``cpu_s``, ``cpu_s_fcfs``: CPU seconds of each simulation (this process; time is simulated,
  so CPU, not wall, is the allocator's cost);

and the load average at the start and end (``load_avg_at_start``, ``load_avg_at_end``,
``load_avg_1m_at_start``) with the bench's own wall and CPU seconds (``bench_*``).

The baseline a scheduler would use instead is plain first come, first served: the same
allocator with fair share off (``fair_share_s_per_gpu_hour=0``), run in the same process on the
same arrivals (``jain_fairness_fcfs``, ``mean_wait_min_fcfs``).

``--quick`` runs 200 requests instead of 1,000.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo
from scalelab.spawner.allocator import GPUAllocator
from scalelab.spawner.queue import DEFAULT_FAIR_SHARE_S_PER_GPU_HOUR


async def simulate(
    n_gpus: int,
    n_requests: int,
    n_users: int = 100,
    seed: int = 0,
    fair_share: float = DEFAULT_FAIR_SHARE_S_PER_GPU_HOUR,
) -> dict:
    rng = random.Random(seed)
    clock = [0.0]
    alloc = GPUAllocator(
        [f"GPU-{i:03d}" for i in range(n_gpus)],
        clock=lambda: clock[0],
        session_s=1800.0,
        fair_share_s_per_gpu_hour=fair_share,
    )
    # Every user has the same workload (same GPUs and holding times), arriving at random times.
    per_user = max(1, n_requests // n_users)
    workload = [(rng.choice((1, 2)), rng.expovariate(1 / 1800)) for _ in range(per_user)]
    arrivals = sorted(
        (rng.uniform(0, 600), f"u{u:03d}", u * per_user + j, gpus, hold_s)
        for u in range(n_users)
        for j, (gpus, hold_s) in enumerate(workload)
    )
    in_use: set[str] = set()
    double = 0
    timings: list[float] = []
    releases: list[tuple[float, str]] = []
    served: list[tuple[str, int, float, float]] = []  # user, gpus, start, end
    waits: list[float] = []
    tasks: list[asyncio.Task] = []

    async def request(user: str, index: int, gpus: int, hold_s: float, at: float) -> None:
        nonlocal double
        server = f"{user}/{index}"
        start = time.perf_counter()
        holding = await alloc.acquire(server, user, gpus)
        if clock[0] == at:  # granted at once: the whole call was one decision
            timings.append(time.perf_counter() - start)
        double += len(in_use & set(holding.gpus))
        in_use.update(holding.gpus)
        waits.append(clock[0] - at)
        heapq.heappush(releases, (clock[0] + hold_s, server))
        served.append((user, gpus, clock[0], clock[0] + hold_s))

    pending = list(arrivals)
    while pending or releases or any(not t.done() for t in tasks):
        next_arrival = pending[0][0] if pending else float("inf")
        next_release = releases[0][0] if releases else float("inf")
        if next_arrival <= next_release and pending:
            at, user, index, gpus, hold_s = pending.pop(0)
            clock[0] = at
            tasks.append(asyncio.create_task(request(user, index, gpus, hold_s, at)))
        elif releases:
            clock[0], server = heapq.heappop(releases)
            holding = alloc.ledger.holding(server)
            in_use.difference_update(holding.gpus if holding else ())
            start = time.perf_counter()
            await alloc.release(server)
            timings.append(time.perf_counter() - start)
        for _ in range(3):
            await asyncio.sleep(0)  # let granted requests resume at this simulated instant
        if not pending and not releases and all(t.done() for t in tasks):
            break
    horizon = statistics.median(end for *_, end in served)
    hours: dict[str, float] = {}
    for user, gpus, start, end in served:
        hours[user] = hours.get(user, 0.0) + gpus * max(0.0, min(end, horizon) - start) / 3600
    values = list(hours.values())
    jain = sum(values) ** 2 / (len(values) * sum(v * v for v in values))
    timings.sort()
    return {
        "gpus": n_gpus,
        "requests": n_requests,
        "double_allocations": double,
        "decisions_per_s": round(len(timings) / sum(timings)),
        "p99_decision_ms": round(timings[int(0.99 * (len(timings) - 1))] * 1000, 3),
        "jain_fairness": round(jain, 3),
        "mean_wait_min": round(statistics.mean(waits) / 60, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 requests instead of 1,000")
    args = parser.parse_args()
    info = RunInfo()
    n = 200 if args.quick else 1000
    results = []
    for gpus in (8, 64):
        cpu = time.process_time()
        result = asyncio.run(simulate(gpus, n))
        result["cpu_s"] = round(time.process_time() - cpu, 3)
        cpu = time.process_time()
        baseline = asyncio.run(simulate(gpus, n, fair_share=0.0))
        result["cpu_s_fcfs"] = round(time.process_time() - cpu, 3)
        result["jain_fairness_fcfs"] = baseline["jain_fairness"]
        result["mean_wait_min_fcfs"] = baseline["mean_wait_min"]
        results.append(result)
    print(
        json.dumps(
            {
                "results": results,
                "double_allocations": sum(r["double_allocations"] for r in results),
                **info.figures(),
            }
        )
    )


if __name__ == "__main__":
    main()
