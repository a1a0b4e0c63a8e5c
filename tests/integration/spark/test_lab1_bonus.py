"""Lab 1's bonus cell in the real PySpark kernel: without ``msd-full`` in the store it says what
to run and what that needs; with it (a synthetic stand-in fetched through the real fetch code) it
fits the pipeline on UCI's train split and evaluates on the test split."""

from __future__ import annotations

from pathlib import Path

import nbformat

from scalelab.store import fetch_dataset, open_store
from tests.conftest import REPO
from tests.support.kernelrun import Kernel
from tests.support.msdzip import csv_lines, small_entry, synthetic_rows, write_zip

NAME = "lab1_millionsong_regression.ipynb"
BONUS_CELL = "cell-39"

# What the lab has built by the time of the bonus cell, as far as the bonus cell uses it.
LAB_STATE = """
from pyspark.ml import Pipeline
from pyspark.ml.evaluation import RegressionEvaluator
from pyspark.ml.feature import VectorAssembler
from pyspark.ml.regression import LinearRegression

evaluator = RegressionEvaluator(labelCol="label", predictionCol="prediction", metricName="rmse")
min_year = 1922.0
"""


def _cell(path: Path, cell_id: str) -> str:
    return next(c.source for c in nbformat.read(path, as_version=4).cells if c.id == cell_id)


def test_bonus_cell_says_what_to_do_then_runs_on_the_shards(
    tmp_path: Path, kernel_environment: dict[str, str]
):
    instructor = REPO / "notebooks" / NAME
    bonus = _cell(instructor, BONUS_CELL)
    assert _cell(REPO / "notebooks" / "release" / NAME, BONUS_CELL) == bonus  # no solution in it
    setup = "\n".join(_cell(instructor, c) for c in ("cell-03", "cell-04")) + LAB_STATE
    store = tmp_path / "store"
    store.mkdir()
    env = {**kernel_environment, "SCALELAB_STORE_URL": store.as_uri()}

    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path)) as kernel:
        ran = kernel.run(setup, timeout_s=600)
        assert ran["error"] is None, ran

        missing = kernel.run(bonus)
        assert missing["error"] is None, missing
        text = " ".join(missing["stdout"].split())
        assert "The full YearPredictionMSD is not in the course store" in text
        assert "scalelab data fetch msd-full" in missing["stdout"]
        assert "internet access to archive.ics.uci.edu" in text
        assert "--mirror" in text

        # The course staff fetch it (here: a 300-row stand-in from a mirror folder).
        mirror = tmp_path / "mirror"
        write_zip(mirror / "msd_full" / "yearpredictionmsd.zip", csv_lines(synthetic_rows(300)))
        spec = small_entry(splits=(("train", 250), ("test", 50)), rows_per_shard=100)
        fs = open_store(store.as_uri())
        assert fetch_dataset(spec, fs, mirror=mirror, log=lambda _: None, download=False)

        present = kernel.run(bonus, timeout_s=600)
        assert present["error"] is None, present
        assert "full data set: 250 training songs, 50 test songs" in present["stdout"]
        assert "full data set: test RMSE " in present["stdout"]
        rmse = kernel.run("print(rmse_full > 0, -10 < r2_full <= 1)")
        assert rmse["stdout"].strip() == "True True", rmse
