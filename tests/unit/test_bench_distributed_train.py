"""bench/distributed_train.py: its figures (pure) and its baseline without Spark (real ranks).

The baseline's ranks are real processes (torch.multiprocessing, gloo on loopback) training Lab
2's ConvNet on one real Fashion-MNIST shard per rank.
"""

from __future__ import annotations

import math

import pytest

from bench.distributed_train import (
    STAGES,
    TRAIN,
    Job,
    compare,
    cosine_factor,
    first_step_stages,
    lab2_convnet,
    ranks_without_spark,
    summary,
)
from scalelab.store import open_store


def _run(seed: int, speed: float, accuracy: float) -> dict:
    stages = {stage: float(i + seed) for i, stage in enumerate(STAGES)}
    stages["launcher"] = None  # as without Spark
    return {
        "seed": seed,
        "samples_per_s": speed,
        "first_step_s": 10.0,
        "first_step_stages": stages,
        "test_accuracy": accuracy,
    }


def test_summary_takes_the_median_speed_and_the_mean_accuracy_with_its_spread():
    runs = [_run(0, 1000.0, 0.88), _run(1, 1300.0, 0.89), _run(2, 1100.0, 0.87)]
    got = summary(runs)
    assert got["samples_per_s"] == 1100.0  # the median, not the mean (1133.3)
    assert got["test_accuracy"] == 0.88
    assert got["test_accuracy_sd"] == 0.01
    assert got["samples_per_s_each"] == [1000.0, 1300.0, 1100.0]
    assert summary(runs[:1])["test_accuracy_sd"] == 0.0
    # each stage's median over the seeds (offsets 0, 1, 2: the middle one), None where no run
    # had the stage
    assert got["first_step_stages"]["first_batch"] == STAGES.index("first_batch") + 1.0
    assert got["first_step_stages"]["launcher"] is None


def test_first_step_stages_are_the_slowest_ranks():
    ranks = [
        {"reached_s": {"launcher": None, "rank_process": 1.0, "first_batch": 6.5}},
        {"reached_s": {"launcher": 0.5, "rank_process": 2.25, "first_batch": 6.0}},
    ]
    got = first_step_stages(ranks)
    assert got["rank_process"] == 2.25 and got["first_batch"] == 6.5
    assert got["launcher"] == 0.5  # the one rank that had it
    assert got["ddp"] is None and list(got) == list(STAGES)


def test_compare_says_whether_two_workers_match_one_within_noise():
    one = [_run(0, 1000.0, 0.880), _run(1, 1000.0, 0.882), _run(2, 1000.0, 0.884)]
    close = [_run(0, 1700.0, 0.881), _run(1, 1800.0, 0.879), _run(2, 1600.0, 0.883)]
    got = compare(one, close)
    assert got["scaling_efficiency"] == 0.85  # the medians: 1700 / (2 x 1000)
    assert got["accuracy_difference"] == pytest.approx(-0.001)
    assert got["accuracy_noise"] == pytest.approx(math.sqrt(0.002**2 / 3 * 2), abs=1e-4)
    assert got["accuracy_equal_within_noise"] is True
    far = [_run(0, 1700.0, 0.860), _run(1, 1700.0, 0.862), _run(2, 1700.0, 0.864)]
    assert compare(one, far)["accuracy_equal_within_noise"] is False
    alone = compare(one[:1], far[:1])  # one run each: no noise figure, no verdict
    assert alone["accuracy_noise"] is None
    assert alone["accuracy_equal_within_noise"] is None


def test_the_learning_rate_decays_from_one_to_zero_and_stays_there():
    assert cosine_factor(0, 100) == 1.0
    assert cosine_factor(50, 100) == pytest.approx(0.5)
    assert cosine_factor(100, 100) == pytest.approx(0.0)
    assert cosine_factor(150, 100) == pytest.approx(0.0)  # not back up (no restarts)


def test_each_rank_without_spark_trains_its_own_copy_of_the_model(course_store):
    """Regression: the baseline handed the module itself to torch.multiprocessing, which moved
    its tensors to shared memory, so both ranks stepped one set of weights and BatchNorm
    buffers: a BatchNorm layer counted 264 and 315 batches in a run of 157 steps a rank."""
    store = open_store(course_store)
    job = Job(
        store=store,
        path=f"{TRAIN}/part-0000[01].parquet",  # one 10,000-image shard per rank
        epochs=1,
        global_batch=256,
        train_rows=20_000,
        test=(),
    )
    model = lab2_convnet(0)
    counted_before = int(model.state_dict()["1.num_batches_tracked"])  # the cell's own forward
    out = ranks_without_spark(2, model, job.train_args(seed=0, called_at=0.0))
    steps = math.ceil(10_000 / 128)  # a rank's batches of 128 (half the global batch)
    for layer in ("1", "5"):  # Lab 2's two BatchNorm2d layers
        assert int(out["state"][f"{layer}.num_batches_tracked"]) == counted_before + steps
    assert [r["samples"] for r in out["ranks"]] == [10_000, 10_000]
    for rank in out["ranks"]:  # each rank's stages in their order, before its first step
        reached = [rank["reached_s"][stage] for stage in STAGES[1:]]
        assert reached == sorted(reached) and reached[-1] <= rank["first_step_s"], rank
    # the parent's model was not trained by the ranks
    assert int(model.state_dict()["1.num_batches_tracked"]) == counted_before
