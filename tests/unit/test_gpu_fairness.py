"""The queue rule's fairness with its default, on bench/allocation.py's simulation (simulated
time: the figures are the same on any machine; 1,000 requests of 100 users with the same
workload, at 8 and 64 GPUs)."""

from __future__ import annotations

import asyncio

import pytest

from bench.allocation import simulate


@pytest.mark.parametrize("gpus", [8, 64])
def test_the_default_fair_share_gives_every_user_a_fair_part_of_the_gpu_hours(gpus: int):
    fair = asyncio.run(simulate(gpus, 1000))
    fcfs = asyncio.run(simulate(gpus, 1000, fair_share=0.0))
    assert fair["double_allocations"] == 0
    assert fair["jain_fairness"] >= 0.95, fair
    assert fcfs["jain_fairness"] < 0.85, fcfs  # what the rule corrects
    assert fair["mean_wait_min"] < 1.15 * fcfs["mean_wait_min"]  # 11-13 % longer waits here
