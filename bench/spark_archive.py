"""Benchmark: a Spark driver's start with and without ScaleLab's class-data archive.

Each run is a fresh Python process that builds a local ``SparkSession`` (``local[2]``, UI on,
as the PySpark kernel's) with the driver options under test, runs the warm kernel's five small
jobs and a DataFrame aggregation, and reports the seconds to the session, the seconds of the
jobs and the driver JVM's CPU seconds (user + system, read before it stops). ``archive`` runs
add :func:`scalelab.kernels.spark_archive.java_options` (the archive ``install.sh`` built);
``jars`` runs load Spark from its jars as without one. The two alternate, ``--runs`` each.

Prints one JSON object: per way, the median ``session_s``, ``jobs_s`` and ``jvm_cpu_s``; the
ratios archive / jars of each (lower is better); the archive's size in MiB; and the load
average and CPU seconds every bench prints (``bench/_run_info.py``). Options: ``--runs N`` (5),
``--c1`` to run both ways on the JIT's first tier only, as the test suite does.

Usage: ``.venv/bin/python bench/spark_archive.py [--runs N] [--c1]`` from the repository root,
after ``./install.sh``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo
from scalelab.kernels import spark_archive

#: One driver's start, its jobs and its JVM's CPU seconds, as JSON on the last line.
ONE_DRIVER = """
import json, sys, time
import psutil
from pyspark.sql import SparkSession
began = time.monotonic()
builder = SparkSession.builder.master("local[2]").appName("bench-spark-archive")
if sys.argv[1]:
    builder = builder.config("spark.driver.extraJavaOptions", sys.argv[1])
spark = builder.getOrCreate()
ready = time.monotonic()
for _ in range(5):
    spark.range(3).count()
df = spark.createDataFrame([(i, f"k{i % 3}") for i in range(100)], ["id", "key"])
df.groupBy("key").count().collect()
done = time.monotonic()
jvms = [p for p in psutil.Process().children(recursive=True) if p.name() == "java"]
cpu = sum(p.cpu_times().user + p.cpu_times().system for p in jvms)
spark.stop()
print(json.dumps({"session_s": ready - began, "jobs_s": done - ready, "jvm_cpu_s": cpu}))
"""


def one_driver(options: list[str]) -> dict[str, float]:
    """One fresh driver with ``options``; its figures."""
    env = {k: v for k, v in os.environ.items() if k not in spark_archive.CLASS_PATH_FOLDERS}
    run = subprocess.run(
        [sys.executable, "-c", ONE_DRIVER, " ".join(options)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="drivers each way (5)")
    parser.add_argument("--c1", action="store_true", help="both ways on the JIT's first tier")
    args = parser.parse_args()
    archive_options = spark_archive.java_options()
    if not archive_options:
        sys.exit(f"no archive at {spark_archive.ARCHIVE}: run ./install.sh first")
    info = RunInfo()
    base = ["-XX:TieredStopAtLevel=1"] if args.c1 else []
    ways = {"archive": base + archive_options, "jars": base}
    runs: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
    for index in range(args.runs):
        order = list(ways) if index % 2 == 0 else list(reversed(ways))
        for way in order:
            runs[way].append(one_driver(ways[way]))
    report: dict = {"runs": args.runs, "c1": args.c1}
    for way, results in runs.items():
        for key in ("session_s", "jobs_s", "jvm_cpu_s"):
            report[f"{way}_{key}"] = round(statistics.median(r[key] for r in results), 2)
    for key in ("session_s", "jobs_s", "jvm_cpu_s"):
        report[f"{key.removesuffix('_s')}_ratio"] = round(
            report[f"archive_{key}"] / report[f"jars_{key}"], 3
        )
    report["archive_mib"] = round(spark_archive.ARCHIVE.stat().st_size / 2**20)
    print(json.dumps({**report, **info.figures()}))


if __name__ == "__main__":
    main()
