"""Benchmark: streaming Parquet shards from the store through a DataLoader, in bounded memory.

The script writes Parquet shards of synthetic rows in the Million Song schema (``year`` and 90
float64 features ``f01`` .. ``f90``, 728 bytes a row; uncompressed, 64 MiB shards of 8 MiB row
groups; ``--quick``: 16 MiB shards of 4 MiB row groups) into a temporary local store, 1 GiB and
4 GiB of them, and removes them at the end. Each measurement runs in a child process of its own:

- ``stream``: :class:`scalelab.store.streaming.TorchParquetDataset` over the store, shuffled,
  ``batch_size=4096`` rows, the features stacked into one float64 ``(rows, 90)`` array by its
  ``stack`` option (its ``transform`` only picks ``(features, year)``), through
  ``torch.utils.data.DataLoader(num_workers=2, batch_size=None)``;
- ``raw``: reading the same shard files' bytes with plain ``open().readinto`` (8 MiB chunks),
  from the same disk;
- ``pandas``: the usual pattern, ``pandas.read_parquet(folder)`` then ``DataFrame.to_numpy()``.

The baseline a user would choose instead is ``pandas``: its memory (and speed) beside the
stream's; ``raw`` is the speed bound (no decoding at all), not an alternative a user has.

Prints one JSON object:

- ``throughput_ratio``: raw seconds / stream seconds on the 4 GiB set (goal >= 0.8), with
  ``throughput_ratio_1g`` and both rates in MiB/s (``stream_mib_s_*``, ``raw_mib_s_*``);
- ``peak_rss_mib_1g``, ``peak_rss_mib_4g``: peak memory of the streaming child and its two
  DataLoader workers (goal: flat, < 1024). Summed over the processes as PSS (proportional set
  size: pages shared by the forked workers are counted once), read with psutil before the
  stream starts, at its first batch and its last (every process alive; the workers exit just
  after the last), and every 250 ms between (``pss_samples_*`` says how many), so a run
  shorter than the interval still has at least three readings (``stream_processes_*``: the
  processes seen, 3 when both workers were caught); ``start_pss_mib_*`` is the first reading,
  the child alone with its imports done and no data read (torch alone is about 500 MiB of it;
  PSS divides a shared library's pages among every process on the machine that maps them, so
  other users' torch processes lower it), so the stream's own memory is the difference;
  ``peak_rss_sum_mib_*`` sums each process's peak RSS (the kernel's ``VmHWM``, a counter that
  misses no peak, read every 50 ms and at the first and last batch), which counts shared pages
  once per process: an upper bound;
- ``baseline_peak_rss_mib_1g``, ``baseline_peak_rss_mib_4g``: the pandas child's peak RSS
  (its ``ru_maxrss``, from ``wait4``), and its speed ``baseline_mib_s_*`` and CPU seconds
  ``baseline_cpu_s_*``; skipped (null, with ``baseline_skipped_*`` saying why) when the
  machine has not 3.5 times the data set free;
- ``stream_cpu_s_*``, ``raw_cpu_s_*``: CPU seconds (user + system, workers included) of each,
  which other users of a busy machine disturb less than wall time; the load average at the
  start and end (``load_avg_at_start``, ``load_avg_at_end``, ``load_avg_1m_at_start``) says
  how busy the machine was, ``bench_*`` the bench's own wall and CPU seconds (writing the
  shards, its children);
- ``sizes_mib``: the data set sizes measured (``--quick``: 64 and 256 MiB instead of 1 and 4 GiB).

The page cache is not dropped (that needs root and would hit other users): the raw reader and
the stream both read what the writer just left in it, so the ratio compares decoding and
shuffling with memcpy-speed reads, the hardest case for the stream.

Usage: ``.venv/bin/python bench/data_stream.py [--quick] [--tmp DIR]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import PeakMemory, RunInfo, run_measured

FEATURES = 90
ROW_BYTES = (FEATURES + 1) * 8
#: Shard and row group sizes: (full run, --quick). Quick shards are smaller so that both quick
#: sizes still have more shards than the two workers read at once.
SHARD_BYTES = {False: 64 * 2**20, True: 16 * 2**20}
ROW_GROUP_BYTES = {False: 8 * 2**20, True: 4 * 2**20}
FEATURE_NAMES = [f"f{i:02d}" for i in range(1, FEATURES + 1)]


def write_dataset(folder: Path, total_bytes: int, seed: int, quick: bool = False) -> int:
    """Write ``total_bytes`` of synthetic Million Song rows as shards; returns bytes on disk."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows_per_shard = SHARD_BYTES[quick] // ROW_BYTES
    shards = max(1, total_bytes // SHARD_BYTES[quick])
    for index in range(shards):
        columns = {"year": rng.integers(1922, 2012, rows_per_shard).astype(np.float64)}
        block = rng.standard_normal((FEATURES, rows_per_shard))
        columns.update({name: block[i] for i, name in enumerate(FEATURE_NAMES)})
        pq.write_table(
            pa.table(columns),
            folder / f"part-{index:05d}.parquet",
            compression="none",
            use_dictionary=False,
            row_group_size=ROW_GROUP_BYTES[quick] // ROW_BYTES,
        )
    return sum(p.stat().st_size for p in folder.iterdir())


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def child_stream(folder: Path, store_root: Path) -> dict:
    import torch.utils.data

    from scalelab.store import open_store
    from scalelab.store.streaming import TorchParquetDataset

    def features_and_label(batch: dict) -> tuple:
        return batch["features"], batch["year"]

    expected = sum(pq.read_metadata(p).num_rows for p in folder.iterdir())
    sampler = PeakMemory()
    sampler.start()  # a first reading now, then VmHWM every 50 ms and PSS every 250 ms
    store = open_store(store_root.as_uri())
    ds = TorchParquetDataset(
        str(folder.relative_to(store_root)),
        store=store,
        batch_size=4096,
        stack={"features": FEATURE_NAMES},
        transform=features_and_label,
    )
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    cpu0 = cpu_seconds()
    start = time.perf_counter()
    rows = 0
    checksum = 0.0
    for x, y in loader:
        assert x.shape == (len(y), FEATURES) and x.dtype == torch.float64, (x.shape, x.dtype)
        if rows == 0:
            sampler.sample()  # the first batch: both workers up and streaming
        rows += len(y)
        checksum += float(x[0, 0])
        if rows == expected:
            sampler.sample()  # the last batch: the workers still alive (they exit next)
    seconds = time.perf_counter() - start
    sampler.stop()
    del loader  # its workers are joined: their CPU time is in RUSAGE_CHILDREN
    return {
        "seconds": seconds,
        "cpu_s": cpu_seconds() - cpu0,
        "rows": rows,
        "peak_pss": sampler.peak_pss,
        "start_pss": sampler.first_pss,
        "peak_rss_sum": sampler.peak_rss,
        "pss_samples": sampler.pss_samples,
        "processes": len(sampler.processes_seen),
    }


def child_raw(folder: Path) -> dict:
    buf = bytearray(8 * 2**20)
    view = memoryview(buf)
    cpu0 = cpu_seconds()
    start = time.perf_counter()
    total = 0
    for path in sorted(folder.iterdir()):
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(view):
                total += n
    return {"seconds": time.perf_counter() - start, "bytes": total, "cpu_s": cpu_seconds() - cpu0}


def child_pandas(folder: Path) -> dict:
    import pandas as pd

    start = time.perf_counter()
    frame = pd.read_parquet(folder)
    x = frame[FEATURE_NAMES].to_numpy()
    y = frame["year"].to_numpy()
    seconds = time.perf_counter() - start
    rows = len(y)
    del frame
    return {"seconds": seconds, "rows": rows, "x_bytes": x.nbytes}


def run_child(mode: str, folder: Path, store_root: Path) -> dict:
    """One measurement in a child of its own; its JSON plus ``peak_rss`` and ``child_cpu_s``
    (the child's own ``ru_maxrss`` and CPU seconds, from ``wait4``)."""
    done = run_measured([sys.executable, __file__, "--child", mode, str(folder), str(store_root)])
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["peak_rss"] = done.peak_rss
    out["child_cpu_s"] = done.cpu_s
    return out


def mib(n: float) -> float:
    return round(n / 2**20, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 and 256 MiB, within a minute")
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the temporary store")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, folder, store_root = args.child
        if mode == "stream":
            result = child_stream(Path(folder), Path(store_root))
        elif mode == "raw":
            result = child_raw(Path(folder))
        else:
            result = child_pandas(Path(folder))
        print(json.dumps(result))
        return

    info = RunInfo()
    sizes = {"1g": 64 * 2**20, "4g": 256 * 2**20} if args.quick else {"1g": 2**30, "4g": 4 * 2**30}
    report: dict = {"quick": args.quick}
    tmp = tempfile.mkdtemp(prefix="scalelab-bench-stream-", dir=args.tmp)
    try:
        store_root = Path(tmp) / "store"
        for label, size in sizes.items():
            folder = store_root / "bench" / f"millionsong-synthetic-{label}"
            on_disk = write_dataset(folder, size, seed=len(label) + size % 97, quick=args.quick)
            raw = run_child("raw", folder, store_root)
            stream = run_child("stream", folder, store_root)
            raw_again = run_child("raw", folder, store_root)  # the same cache state as the stream
            raw_s = min(raw["seconds"], raw_again["seconds"])
            assert raw["bytes"] == on_disk
            # pandas holds the data about three times over; never let it push the machine
            # (and its other users) into the OOM killer.
            need = 3.5 * on_disk + 2**30
            available = psutil.virtual_memory().available
            if available > need:
                pandas = run_child("pandas", folder, store_root)
                assert stream["rows"] == pandas["rows"], (stream["rows"], pandas["rows"])
                report[f"baseline_peak_rss_mib_{label}"] = mib(pandas["peak_rss"])
                report[f"baseline_mib_s_{label}"] = round(on_disk / 2**20 / pandas["seconds"], 1)
                report[f"baseline_cpu_s_{label}"] = round(pandas["child_cpu_s"], 1)
            else:
                report[f"baseline_peak_rss_mib_{label}"] = None
                report[f"baseline_skipped_{label}"] = (
                    f"needs about {mib(need)} MiB, {mib(available)} MiB available"
                )
            report.setdefault("sizes_mib", {})[label] = mib(on_disk)
            report[f"throughput_ratio_{label}"] = round(raw_s / stream["seconds"], 3)
            report[f"stream_mib_s_{label}"] = round(on_disk / 2**20 / stream["seconds"], 1)
            report[f"raw_mib_s_{label}"] = round(on_disk / 2**20 / raw_s, 1)
            report[f"stream_cpu_s_{label}"] = round(stream["cpu_s"], 1)
            report[f"raw_cpu_s_{label}"] = round(min(raw["cpu_s"], raw_again["cpu_s"]), 2)
            report[f"peak_rss_mib_{label}"] = mib(stream["peak_pss"])
            report[f"peak_rss_sum_mib_{label}"] = mib(stream["peak_rss_sum"])
            report[f"pss_samples_{label}"] = stream["pss_samples"]
            report[f"start_pss_mib_{label}"] = mib(stream["start_pss"])
            report[f"stream_processes_{label}"] = stream["processes"]
            report[f"rows_{label}"] = stream["rows"]
            shutil.rmtree(folder)
        report["throughput_ratio"] = report["throughput_ratio_4g"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.update(info.figures())
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
