"""The test cluster's start, memory and stop (hadoop/testcluster, as the tests start it), as JSON.

Starts ``tests/support/hadoopcluster.HadoopTestCluster`` (HDFS; with ``--yarn N`` also YARN with N
NodeManagers) ``--runs`` times in a temporary folder and prints, per run and as medians:
``start_s`` (the JVM's start to its ready line), ``rss_mib`` (the JVM's resident memory 5 s
after ready, idle), ``peak_rss_mib`` (its high-water mark, ``VmHWM``, at that time) and
``stop_s``. Linux only (``/proc``). Usage::

    .venv/bin/python bench/testcluster_start.py --yarn 2 --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.hadoopcluster import HadoopTestCluster, missing_reason


def status_kib(pid: int, field: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def one_run(folder: Path, nodemanagers: int, settle_s: float) -> dict:
    cluster = HadoopTestCluster(folder, nodemanagers=nodemanagers)
    cluster.start()
    try:
        time.sleep(settle_s)
        assert cluster.proc is not None
        rss = status_kib(cluster.proc.pid, "VmRSS") / 1024
        peak = status_kib(cluster.proc.pid, "VmHWM") / 1024
    finally:
        stop_s = cluster.stop()
    return {
        "start_s": round(cluster.start_s, 1),
        "rss_mib": round(rss),
        "peak_rss_mib": round(peak),
        "stop_s": round(stop_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--yarn", type=int, default=2, help="NodeManagers (0: HDFS only)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=5.0)
    args = parser.parse_args()
    reason = missing_reason()
    if reason is not None:
        sys.exit(reason)
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="testcluster-bench-") as tmp:
            runs.append(one_run(Path(tmp) / f"run{i}", args.yarn, args.settle_s))
    medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    print(json.dumps({"nodemanagers": args.yarn, "heap": "512m", "median": medians, "runs": runs}))


if __name__ == "__main__":
    main()
