"""Seconds until a call on a dead namenode fails: hdfs-native's own retries against ScaleLab's.

A real namenode (the HDFS test cluster, ``tests/support/hadoopcluster.py``, simple authentication)
is
started, written to through a student's store (``student_store``, ``hdfs://``), then stopped, so
its port refuses connections, as a namenode whose process is gone does. Then ``store.ls`` is timed
until it raises, with:

- ``scalelab``: ScaleLab's default (``dfs.client.failover.max.attempts`` = 1, see
  ``scalelab.store.access.hdfs.FAILOVER_ATTEMPTS``): ``scalelab_dead_namenode_s``;
- ``hdfs_native_default`` (not with ``--quick``): hdfs-native's own default, 15 attempts with
  sleeps of 0.5 s doubling up to 15 s: ``hdfs_native_default_dead_namenode_s`` (about 3 minutes).

Each with the error's class and first 200 characters. Also the cluster's start and stop seconds
and its JVM's peak RSS (``VmHWM``, MiB) just before the stop, and, with ``--kerberos``, the same for
the secure cluster (its KDC in the JVM): ``secure_start_s``, ``secure_peak_rss_mib``.

Prints one JSON object with the load average at the start and end and the bench's CPU seconds.
``--quick``: ScaleLab's setting only (about 30 s on 2 busy cores); the default takes about 4
minutes.

Usage: ``.venv/bin/python bench/hdfs_dead_namenode.py [--quick] [--kerberos]`` from the
repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo, vm_hwm
from tests.support.hadoopcluster import HadoopTestCluster, missing_reason


def _mib(pid: int) -> float | None:
    peak = vm_hwm(pid)
    return round(peak / 2**20, 1) if peak else None


def time_dead_call(store) -> dict:
    began = time.perf_counter()
    try:
        store.ls("home/alice")
    except Exception as exc:  # noqa: BLE001 -- what the student would see, measured
        return {
            "s": round(time.perf_counter() - began, 2),
            "error": f"{type(exc).__name__}: {str(exc)[:200]}",
        }
    return {"s": round(time.perf_counter() - began, 2), "error": None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ScaleLab's setting only")
    parser.add_argument("--kerberos", action="store_true", help="also start the secure cluster")
    args = parser.parse_args()
    reason = missing_reason(args.kerberos)
    if reason:
        sys.exit(reason)
    info = RunInfo()
    from scalelab.store import student_store

    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="scalelab-bench-") as folder:
        cluster = HadoopTestCluster(Path(folder) / "plain")
        cluster.start()
        os.environ["HADOOP_CONF_DIR"] = str(cluster.conf_dir)
        os.environ["HADOOP_USER_NAME"] = cluster.superuser
        url = cluster.url("/course-bench")
        stores = {"scalelab": student_store("alice", url)}
        if not args.quick:
            options = {"dfs.client.failover.max.attempts": "15"}  # hdfs-native's own default
            stores["hdfs_native_default"] = student_store("alice", url, options)
        for store in stores.values():
            store.pipe_file("home/alice/alive.txt", b"the namenode answers")
        out["start_s"] = round(cluster.start_s, 2)
        out["peak_rss_mib"] = _mib(cluster.proc.pid) if cluster.proc else None
        out["stop_s"] = round(cluster.stop(), 2)
        for name, store in stores.items():
            result = time_dead_call(store)
            out[f"{name}_dead_namenode_s"] = result["s"]
            out[f"{name}_error"] = result["error"]
        if args.kerberos:
            secure = HadoopTestCluster(Path(folder) / "secure", kerberos=True, students=("alice",))
            secure.start()
            try:
                env = secure.kinit("alice", Path(folder) / "krb5cc_alice")
                os.environ.update(env)
                os.environ.pop("HADOOP_USER_NAME", None)
                store = student_store("alice", secure.url("/"))
                out["secure_rpc_ok"] = store.exists("datasets/none") is False  # a GSSAPI RPC
                out["secure_start_s"] = round(secure.start_s, 2)
                out["secure_peak_rss_mib"] = _mib(secure.proc.pid) if secure.proc else None
            finally:
                out["secure_stop_s"] = round(secure.stop(), 2)
    print(json.dumps({**out, **info.figures()}, indent=1))


if __name__ == "__main__":
    main()
