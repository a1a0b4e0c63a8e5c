"""Seconds until a first cell runs: ScaleLab's PySpark kernel versus one that builds Spark first.

Both kernels are the same ipykernel with the same environment (``local[2]``, 1g driver); the
baseline's start-up builds the SparkSession before the kernel answers (what a kernel that runs
``SparkSession.builder.getOrCreate()`` at start does), ScaleLab's builds it in the background.
Runs alternate (baseline, ScaleLab, baseline ...). Each time is from "start the kernel" to the
reply of a first cell that does not touch Spark; after it, a first Spark job is run and timed
too (``*_spark_ready_median_s``), so no run overlaps the previous one's JVM start (``--quick``
shuts each kernel, and a half-started JVM, down at once instead).

Prints one JSON object: ``first_cell_speedup`` (baseline median / ScaleLab median; goal >= 3),
``scalelab_first_cell_median_s``, ``eager_first_cell_median_s``, ``*_spark_ready_median_s``
(start to a first Spark job done; not with ``--quick``) and the runs. ``--quick`` does 2 pairs
(about a minute on 2 busy cores), the default 5.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scalelab.kernels.specs import install_kernelspecs, kernelspec
from tests.kernelrun import Kernel

EAGER = "bench-eager-pyspark"
EAGER_STARTUP = (
    "import os; from pyspark.sql import SparkSession; "
    "from scalelab.kernels.spark_defaults import DEFAULT_SPARK_MASTER, spark_conf; "
    "spark = SparkSession.builder.config(map=spark_conf("
    "os.environ.get('SCALELAB_SPARK_MASTER') or DEFAULT_SPARK_MASTER, '1g', 'bench-eager')"
    ").getOrCreate(); sc = spark.sparkContext"
)


def install(data_dir: Path) -> None:
    """ScaleLab's kernelspecs plus the eager baseline's."""
    install_kernelspecs(data_dir)
    spec = kernelspec("pyspark")
    spec["argv"][-1] = f"--IPKernelApp.exec_lines={EAGER_STARTUP}"
    spec["display_name"] = "PySpark (Spark built before the kernel answers)"
    folder = data_dir / "kernels" / EAGER
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(spec))


def first_cell(
    name: str, env: dict[str, str], cwd: str, wait_ready: bool = True
) -> tuple[float, float | None]:
    """(seconds to the first cell's reply, seconds until `spark` works or None) for one start.

    Without ``wait_ready`` the kernel is shut down right after the first cell (its process
    group, the half-started JVM included).
    """
    start = time.monotonic()
    with Kernel(name, env, cwd=cwd) as kernel:
        reply = kernel.run("6 * 7")
        first = time.monotonic() - start
        assert reply["result"] == "42", reply
        if not wait_ready:
            return first, None
        ready = kernel.run("spark.range(3).count()")
        assert ready["result"] == "3", ready
        return first, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 pairs of runs instead of 5")
    args = parser.parse_args()
    pairs = 2 if args.quick else 5
    with tempfile.TemporaryDirectory(prefix="scalelab-kernel-start-") as tmp:
        data_dir = Path(tmp) / "share" / "jupyter"
        install(data_dir)
        (Path(tmp) / "store").mkdir()
        env = {
            **os.environ,
            "JUPYTER_PATH": str(data_dir),
            "SCALELAB_STORE_URL": (Path(tmp) / "store").as_uri(),
            "SCALELAB_STORE_OPTIONS": "{}",
            "SCALELAB_SPARK_MASTER": "local[2]",
            "SCALELAB_SPARK_DRIVER_MEMORY": "1g",
            "SCALELAB_GPUS": "",
            "SCALELAB_LOG_DIR": str(Path(tmp) / "logs"),
        }
        runs: dict[str, list[float]] = {
            "eager": [],
            "scalelab": [],
            "eager_ready": [],
            "scalelab_ready": [],
        }
        for _ in range(pairs):
            first, ready = first_cell(EAGER, env, tmp, wait_ready=not args.quick)
            runs["eager"].append(first)
            if ready is not None:
                runs["eager_ready"].append(ready)
            first, ready = first_cell("scalelab-pyspark", env, tmp, wait_ready=not args.quick)
            runs["scalelab"].append(first)
            if ready is not None:
                runs["scalelab_ready"].append(ready)
    eager = statistics.median(runs["eager"])
    lazy = statistics.median(runs["scalelab"])
    print(
        json.dumps(
            {
                "benchmark": "kernel_start",
                "pairs": pairs,
                "first_cell_speedup": round(eager / lazy, 2),
                "scalelab_first_cell_median_s": round(lazy, 3),
                "eager_first_cell_median_s": round(eager, 3),
                **{
                    f"{kind}_spark_ready_median_s": (
                        round(statistics.median(runs[f"{kind}_ready"]), 3)
                        if runs[f"{kind}_ready"]
                        else None
                    )
                    for kind in ("scalelab", "eager")
                },
                "runs_s": {k: [round(v, 3) for v in vs] for k, vs in runs.items()},
                "goal": "first_cell_speedup >= 3",
            }
        )
    )


if __name__ == "__main__":
    main()
