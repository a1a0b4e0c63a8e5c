"""How long ``scalelab up --hadoop`` takes to a student's first YARN result, as JSON.

Runs ``scalelab up --hadoop`` on a new state folder (``cold``: the cluster formats HDFS) and again
on the same folder (``restart``: kept data, fixed ports), each time as a newcomer would: a student
starts their server, opens a PySpark kernel and runs ``spark.range(1000).count()`` on YARN. Per
run it prints, in seconds from the command's start: ``up_ready_s`` (the banner, with the cluster
up), ``server_ready_s`` (the student's server ready), ``first_yarn_result_s`` (the cell's answer);
and ``cell_s``, from the kernel's start request to that answer (the YARN application's start is
most of it). Run by root, students get system users (the default); the state folder is in a 0755
folder of its own. Usage::

    .venv/bin/python bench/up_hadoop.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo
from tests.support import sysusers
from tests.support.hubproc import ScaleLabUp, execute

STUDENT = "benchy"
CELL = "print(spark.range(1000).count(), sc.master)"


def one_run(state: Path) -> dict:
    """One ``scalelab up --hadoop`` on ``state``, to the student's first YARN result."""
    up = ScaleLabUp(state, shared_identity=os.geteuid() != 0, warm_spark=True)
    up.argv.append("--hadoop")
    began = time.perf_counter()
    try:
        up.start(timeout_s=400)
        ready = time.perf_counter() - began
        up.start_server(STUDENT)
        served = time.perf_counter() - began
        asked = time.perf_counter()
        started = up.server_api(STUDENT, "POST", "/kernels", json={"name": "scalelab-pyspark"})
        kernel = started.json()["id"]
        reply = asyncio.run(execute(up, STUDENT, kernel, CELL, timeout_s=300))
        answered = time.perf_counter()
        if reply["status"] != "ok" or "1000 yarn" not in reply["stdout"]:
            raise SystemExit(f"the cell failed: {reply}")
        up.interrupt()
    finally:
        up.kill()
    return {
        "up_ready_s": round(ready, 2),
        "server_ready_s": round(served, 2),
        "first_yarn_result_s": round(answered - began, 2),
        "cell_s": round(answered - asked, 2),
    }


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    info = RunInfo()
    folder = Path(tempfile.mkdtemp(prefix="scalelab-bench-up-hadoop-"))
    folder.chmod(0o755)
    try:
        cold = one_run(folder / "state")
        restart = one_run(folder / "state")
    finally:
        sysusers.remove_users([STUDENT])
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({"cold": cold, "restart": restart} | info.figures(), indent=2))


if __name__ == "__main__":
    main()
