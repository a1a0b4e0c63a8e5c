"""Benchmark: streaming Parquet shards from HDFS into training, against a raw read of the bytes.

The script starts ScaleLab's HDFS test cluster itself (``tests/support/hadoopcluster.py``: one
namenode and one datanode in one JVM on loopback; ``./install.sh`` builds it), writes Parquet
shards in the Million Song schema (``year`` and 90 float64 features ``f01`` .. ``f90``, 728
bytes a row; uncompressed) into it through the ``hdfs://`` store (hdfs-native), and stops the
cluster at the end. The rows are the Million Song subset from ``../shared/data`` repeated
(its year and 12 features; the 78 others random: ``source`` says so, see :func:`song_rows`).
Sizes: ``--quick`` 96 MiB in 8 MiB shards (4 MiB row groups); a full
run 768 MiB in 32 MiB shards (8 MiB row groups).

Four contenders, each run in a child process of its own, in one order per round that rotates
over ``--rounds`` rounds, medians taken:

- ``stream``: :class:`scalelab.store.streaming.TorchParquetDataset` over the shards in HDFS,
  shuffled, ``batch_size=4096`` rows, the features stacked into one float64 ``(rows, 90)``
  array, through ``torch.utils.data.DataLoader(num_workers=--workers, batch_size=None)``; the
  store's files read ahead 1 MiB at a time (``scalelab.store.access.readahead``);
- ``unbuffered``: the same, with the store opened as before the read-ahead
  (``default_block_size=0``: one DataNode request per read pyarrow makes);
- ``local``: the same stream over the same shards written to a local folder (``file://``): the
  speed to reach;
- ``raw``: the same files' bytes from HDFS through the same store, read in :data:`RAW_PIECE`
  pieces one file after another, nothing decoded: the speed bound of the DataNode's transfer.

Prints one JSON object:

- ``samples_per_s``, ``stream_mib_s``: the stream's median rows per second and MiB (of the
  files) per second; ``unbuffered_mib_s``, ``local_mib_s``, ``raw_mib_s``: the others';
- ``hdfs_over_local``: local seconds / stream seconds (1.0: HDFS as fast as local shards);
  ``unbuffered_over_local``: the same for the old way; ``throughput_ratio``: raw seconds /
  stream seconds (1.0: the stream keeps up with the bare bytes);
- ``stream_peak_pss_mib``, ``stream_peak_rss_sum_mib``, ``stream_start_pss_mib``: peak memory of
  the stream's child and its workers (the largest over the rounds): PSS summed over the
  processes (shared pages counted once), read before the stream, at its first and last batch and
  every 250 ms; the sum of each process's own peak RSS (``VmHWM``, an upper bound); the child
  alone before it reads anything (torch imported). ``local_peak_pss_mib``,
  ``unbuffered_peak_pss_mib``: the same figure for those streams. ``raw_peak_rss_mib``: the raw
  child's (``ru_maxrss``);
- ``stream_seconds``, ``unbuffered_seconds``, ``local_seconds``, ``raw_seconds``: every round's
  seconds; ``stream_cpu_s`` etc.: median CPU seconds of the child (workers included; the
  DataNode's JVM is not in it); ``rows``, ``mib``, ``shards``, ``shard_mib``, ``workers``,
  ``rounds``, ``source``;
- ``cluster_start_s``, ``cluster_stop_s``, ``write_mib_s`` (writing the shards into HDFS), and
  the load average and CPU seconds every bench prints (``bench/_run_info.py``).

The datanode reads from the page cache (nothing is dropped: that needs root and would hit other
users), so both contenders read at memory speed through the datanode's transfer protocol; the
ratio compares decoding, shuffling and the hand-over from the workers with that.

Usage: ``.venv/bin/python bench/hdfs_stream.py [--quick] [--workers N] [--rounds N] [--tmp DIR]``.
``--child MODE JSON`` runs one contender and prints its JSON (the tests' memory check uses it,
with ``epochs`` and ``persistent_workers``: the same workers over every epoch).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._run_info import PeakMemory, RunInfo, own_cpu_seconds, run_measured  # noqa: E402

FEATURES = 90
ROW_BYTES = (FEATURES + 1) * 8
FEATURE_NAMES = [f"f{i:02d}" for i in range(1, FEATURES + 1)]
#: The real Million Song subset (year, then 90 features, comma-separated).
MILLIONSONG = REPO.parent / "shared" / "data" / "millionsong" / "millionsong.txt"
#: (total bytes, shard bytes, row group bytes): full run, --quick.
SIZES = {False: (768 * 2**20, 32 * 2**20, 8 * 2**20), True: (96 * 2**20, 8 * 2**20, 4 * 2**20)}
BENCH_PATH = "bench/millionsong"
#: Bytes per read of the ``raw`` contender: the fastest request size measured on the test cluster
#: (4 MiB pieces 600-746 MiB/s; 1 MiB 484-494; whole 32 MiB shards by ``cat_file`` 277-289).
RAW_PIECE = 4 * 2**20


def song_rows(path: Path = MILLIONSONG) -> tuple[np.ndarray, str]:
    """Rows of the Million Song schema as a float64 ``(rows, 91)`` array (year first), and where
    they come from.

    The course's subset (``../shared/data``) has the year and the 12 timbre averages of each
    song; its 6,724 rows are used with the 78 other features (the full set's timbre
    covariances) drawn at random (``"millionsong+78 random"``); where the file is missing,
    4,096 random rows of the same shape (``"synthetic"``).
    """
    rng = np.random.default_rng(0)
    if path.is_file():
        real = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
        extra = rng.standard_normal((len(real), FEATURES + 1 - real.shape[1]))
        return np.hstack([real, extra]), f"millionsong+{extra.shape[1]} random"
    rows = rng.standard_normal((4096, FEATURES + 1))
    rows[:, 0] = rng.integers(1922, 2012, 4096)
    return rows, "synthetic"


def shard_table(songs: np.ndarray, start: int, rows: int) -> pa.Table:
    """Rows ``start .. start + rows - 1`` of ``songs`` repeated end to end, as a table with the
    Million Song schema (``year``, ``f01`` .. ``f90``; float64)."""
    index = np.arange(start, start + rows) % len(songs)
    block = songs[index]
    columns = {"year": block[:, 0]}
    columns.update(
        {name: np.ascontiguousarray(block[:, i + 1]) for i, name in enumerate(FEATURE_NAMES)}
    )
    return pa.table(columns)


def write_shards(
    store: Any, path: str, songs: np.ndarray, total: int, shard: int, group: int
) -> int:
    """Write ``total`` bytes of rows as uncompressed Parquet shards of ``shard`` bytes (row
    groups of ``group`` bytes) under ``path`` in ``store``; returns the bytes written."""
    rows_per_shard = shard // ROW_BYTES
    written = 0
    for index in range(max(1, total // shard)):
        table = shard_table(songs, index * rows_per_shard, rows_per_shard)
        name = f"{path}/part-{index:05d}.parquet"
        with store.open(name, "wb") as f:
            pq.write_table(
                table,
                f,
                compression="none",
                use_dictionary=False,
                row_group_size=group // ROW_BYTES,
            )
        written += store.info(name)["size"]
    return written


def median(values: list[float]) -> float:
    """The median of ``values`` (the mean of the middle two for an even count)."""
    return float(statistics.median(values))


def child_stream(params: dict) -> dict:
    """The ``stream`` contender: rows, seconds, CPU seconds and peak memory (see the module)."""
    import torch.utils.data

    from scalelab.store import open_store
    from scalelab.store.streaming import TorchParquetDataset

    sampler = PeakMemory()
    sampler.start()  # a first reading now (torch imported, nothing read)
    store = open_store(params["url"], params.get("storage_options"))
    ds = TorchParquetDataset(
        params["path"],
        store=store,
        batch_size=params.get("batch_size", 4096),
        buffer_rows=params.get("buffer_rows", 16384),
        stack={"features": params.get("features", FEATURE_NAMES)},
        columns=["year"],
    )
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=None,
        num_workers=params["workers"],
        persistent_workers=params.get("persistent_workers", False) and params["workers"] > 0,
    )
    cpu0 = sum(own_cpu_seconds())
    start = time.perf_counter()
    rows = 0
    for _epoch in range(params.get("epochs", 1)):
        first = True
        for batch in loader:
            x, y = batch["features"], batch["year"]
            assert x.shape == (len(y), len(ds.layout.stack[0][1])), x.shape
            if first:
                sampler.sample()  # the first batch: the workers up and streaming
                first = False
            rows += len(y)
        sampler.sample()
    seconds = time.perf_counter() - start
    sampler.stop()
    del loader  # its workers are joined: their CPU time is in RUSAGE_CHILDREN
    return {
        "seconds": seconds,
        "cpu_s": sum(own_cpu_seconds()) - cpu0,
        "rows": rows,
        "peak_pss": sampler.peak_pss,
        "start_pss": sampler.first_pss,
        "peak_rss_sum": sampler.peak_rss,
        "processes": len(sampler.processes_seen),
    }


def child_raw(params: dict) -> dict:
    """The ``raw`` contender: every shard's bytes read through the store in :data:`RAW_PIECE`
    pieces, nothing decoded."""
    from scalelab.store import open_store

    store = open_store(params["url"])
    shards = sorted(store.glob(f"{params['path']}/*.parquet"))
    cpu0 = sum(own_cpu_seconds())
    start = time.perf_counter()
    total = 0
    for shard in shards:
        with store.open(shard, "rb") as f:
            while piece := f.read(RAW_PIECE):
                total += len(piece)
    return {
        "seconds": time.perf_counter() - start,
        "cpu_s": sum(own_cpu_seconds()) - cpu0,
        "bytes": total,
    }


def run_child(mode: str, params: dict, env: dict[str, str]) -> dict:
    """One contender in a child process of its own; its JSON plus ``peak_rss`` (``ru_maxrss``)."""
    argv = [sys.executable, __file__, "--child", mode, json.dumps(params)]
    done = run_measured(argv, env=env)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["peak_rss"] = done.peak_rss
    return out


def mib(n: float) -> float:
    return round(n / 2**20, 1)


def measure(args: argparse.Namespace) -> dict:
    """Start the cluster, write the shards, run the rounds; the report (see the module)."""
    from tests.support.hadoopcluster import HadoopTestCluster, missing_reason

    reason = missing_reason()
    if reason is not None:
        raise SystemExit(f"hdfs_stream: {reason}")
    total, shard, group = SIZES[args.quick]
    rounds = args.rounds or 4
    tmp = Path(tempfile.mkdtemp(prefix="scalelab-bench-hdfs-", dir=args.tmp))
    cluster = HadoopTestCluster(tmp / "cluster")
    report: dict = {"quick": args.quick, "workers": args.workers, "rounds": rounds}
    try:
        cluster.start()
        report["cluster_start_s"] = round(cluster.start_s, 1)
        env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_USER_NAME",)}
        env.update(cluster.environment())
        os.environ.update(cluster.environment())
        from scalelab.store import open_store

        url = cluster.url("/bench-stream")
        store = open_store(url)
        songs, report["source"] = song_rows()
        began = time.perf_counter()
        size = write_shards(store, BENCH_PATH, songs, total, shard, group)
        report["write_mib_s"] = round(size / 2**20 / (time.perf_counter() - began), 1)
        local_url = f"file://{tmp / 'local'}"
        write_shards(open_store(local_url), BENCH_PATH, songs, total, shard, group)
        base = {"path": BENCH_PATH, "workers": args.workers}
        contenders = {
            "stream": ("stream", {**base, "url": url}),
            "unbuffered": (
                "stream",
                {**base, "url": url, "storage_options": {"default_block_size": 0}},
            ),
            "local": ("stream", {**base, "url": local_url}),
            "raw": ("raw", {**base, "url": url}),
        }
        names = list(contenders)
        results: dict[str, list[dict]] = {name: [] for name in names}
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                mode, params = contenders[name]
                results[name].append(run_child(mode, params, env))
        raws, streams = results["raw"], results["stream"]
        assert all(r["bytes"] == size for r in raws), (size, raws)
        rows = streams[0]["rows"]
        for name in ("stream", "unbuffered", "local"):
            assert all(s["rows"] == rows for s in results[name]), (name, results[name])
        seconds = {name: median([x["seconds"] for x in results[name]]) for name in names}
        stream_s = seconds["stream"]
        report.update(
            {
                "samples_per_s": round(rows / stream_s),
                **{f"{name}_mib_s": round(size / 2**20 / seconds[name], 1) for name in names},
                "hdfs_over_local": round(seconds["local"] / stream_s, 3),
                "unbuffered_over_local": round(seconds["local"] / seconds["unbuffered"], 3),
                "throughput_ratio": round(seconds["raw"] / stream_s, 3),
                "stream_peak_pss_mib": mib(max(s["peak_pss"] for s in streams)),
                "stream_peak_rss_sum_mib": mib(max(s["peak_rss_sum"] for s in streams)),
                "stream_start_pss_mib": mib(min(s["start_pss"] for s in streams)),
                "stream_processes": max(s["processes"] for s in streams),
                "local_peak_pss_mib": mib(max(s["peak_pss"] for s in results["local"])),
                "unbuffered_peak_pss_mib": mib(max(s["peak_pss"] for s in results["unbuffered"])),
                "raw_peak_rss_mib": mib(max(r["peak_rss"] for r in raws)),
                **{
                    f"{name}_seconds": [round(x["seconds"], 2) for x in results[name]]
                    for name in names
                },
                **{
                    f"{name}_cpu_s": round(median([x["cpu_s"] for x in results[name]]), 2)
                    for name in names
                },
                "rows": rows,
                "mib": mib(size),
                "shards": max(1, total // shard),
                "shard_mib": mib(shard),
            }
        )
    finally:
        report["cluster_stop_s"] = round(cluster.stop(), 1)
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="96 MiB: about a minute")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--rounds", type=int, default=0, help="rounds (default 4)")
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the cluster's data")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, params = args.child[0], json.loads(args.child[1])
        print(json.dumps(child_stream(params) if mode == "stream" else child_raw(params)))
        return
    if args.workers < 0 or args.rounds < 0:
        parser.error("--workers and --rounds must be 0 or more")
    info = RunInfo()
    report = measure(args)
    report.update(info.figures())
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
