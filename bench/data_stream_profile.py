"""Where the streaming benchmark's time goes: each stage of the stream alone, in CPU seconds.

Writes the ``--quick`` data set of ``bench/data_stream.py`` (256 MiB of synthetic Million Song
rows: ``year`` + 90 float64 features, 16 MiB shards of 4 MiB row groups) into a temporary
folder, then times, on the same bytes and each in this one process unless said otherwise:

- ``raw_read``: ``open().readinto`` of the shard files (8 MiB chunks), as the benchmark's baseline;
- ``parquet_decode``: ``ParquetFile.iter_batches`` with the stream's ~4 MiB reads, no threads;
- ``row_major``: the 90 feature columns of each read into one ``(rows, 90)`` array
  (``RecordBatch.to_tensor``);
- ``permute_private`` / ``permute_shared``: one buffer's rows scattered by a permutation into
  a new array in private memory / in a new shared-memory segment (first touch of each page);
- ``loader_transfer``: ready ``(4096, 90)`` float64 tensors in shared memory, sent from 2
  DataLoader workers to the main process (wall time, both cores);
- ``stream_in_process``: the whole :class:`~scalelab.store.streaming.TorchParquetDataset` pass,
  stacked, shuffled, ``batch_size=4096``, without workers.

The baseline is ``raw_read``, the bound every other stage is held against (a profile, not a
contest: the alternative a user would choose instead, ``pandas.read_parquet``, is measured by
``bench/data_stream.py``).

Prints one JSON object: for each stage ``<stage>_mib_per_cpu_s`` (MiB of the data set handled
per CPU second; ``loader_transfer_mib_s`` in MiB per wall second), ``data_mib``, the load
average at the start and end (``load_avg_at_start``, ``load_avg_at_end``,
``load_avg_1m_at_start``) and the bench's own wall and CPU seconds (``bench_wall_s``,
``bench_cpu_s``; the DataLoader workers' in ``bench_children_cpu_s``). The fastest of three
runs counts.

Usage: ``.venv/bin/python bench/data_stream_profile.py [--tmp DIR]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
import torch.utils.data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo
from scalelab.store import open_store
from scalelab.store.streaming import TorchParquetDataset
from scalelab.store.streaming.parquet_stream import auto_read_rows
from scalelab.store.streaming.shared_batches import as_tensor, shared_empty

# The benchmark's own writer and schema, so that both measure the same bytes.
_spec = importlib.util.spec_from_file_location(
    "data_stream", Path(__file__).with_name("data_stream.py")
)
data_stream = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(data_stream)
FEATURE_NAMES, write_dataset = data_stream.FEATURE_NAMES, data_stream.write_dataset
BATCH = 4096


def best_cpu(fn: Callable[[], object], runs: int = 3) -> float:
    """Fewest CPU seconds (this process) of ``runs`` calls of ``fn``."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


class Ready(torch.utils.data.IterableDataset):
    """``count`` ready shared-memory batches per worker: the DataLoader's transfer alone."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __iter__(self):
        x = torch.randn(BATCH, len(FEATURE_NAMES), dtype=torch.float64)
        for _ in range(self.count):
            (out,) = shared_empty([(tuple(x.shape), np.dtype(np.float64))])
            out[:] = x.numpy()
            yield as_tensor(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the temporary store")
    args = parser.parse_args()
    info = RunInfo()
    report: dict = {}
    tmp = Path(tempfile.mkdtemp(prefix="scalelab-bench-profile-", dir=args.tmp))
    try:
        folder = tmp / "store" / "shards"
        data = write_dataset(folder, 256 * 2**20, seed=1, quick=True)
        mib = data / 2**20
        report["data_mib"] = round(mib, 1)
        files = sorted(folder.iterdir())

        def raw() -> None:
            view = memoryview(bytearray(8 * 2**20))
            for path in files:
                with open(path, "rb", buffering=0) as f:
                    while f.readinto(view):
                        pass

        def reads() -> list:
            out = []
            for path in files:
                parquet = pq.ParquetFile(path, pre_buffer=False)
                rows = auto_read_rows(parquet.metadata, None)
                out.extend(parquet.iter_batches(batch_size=rows, use_threads=False))
            return out

        batches = reads()
        arrays = [np.asarray(b.select(FEATURE_NAMES).to_tensor(row_major=True)) for b in batches]
        rng = np.random.default_rng(0)

        def permute(shared: bool) -> None:
            for a in arrays:
                dest = rng.permutation(len(a))
                if shared:
                    (out,) = shared_empty([(a.shape, a.dtype)])
                else:
                    out = np.empty(a.shape, a.dtype)
                out[dest] = a

        stages = {
            "raw_read": raw,
            "parquet_decode": reads,
            "row_major": lambda: [
                b.select(FEATURE_NAMES).to_tensor(row_major=True) for b in batches
            ],
            "permute_private": lambda: permute(False),
            "permute_shared": lambda: permute(True),
        }
        for name, fn in stages.items():
            report[f"{name}_mib_per_cpu_s"] = round(mib / best_cpu(fn), 1)

        store = open_store((tmp / "store").as_uri())
        ds = TorchParquetDataset(
            "shards", store=store, batch_size=BATCH, stack={"features": FEATURE_NAMES}
        )
        report["stream_in_process_mib_per_cpu_s"] = round(
            mib / best_cpu(lambda: sum(1 for _ in ds)), 1
        )

        count = int(data / (BATCH * (len(FEATURE_NAMES) + 1) * 8)) // 2
        best = float("inf")
        for _ in range(3):
            loader = torch.utils.data.DataLoader(Ready(count), batch_size=None, num_workers=2)
            start = time.perf_counter()
            received = sum(1 for _ in loader)
            best = min(best, time.perf_counter() - start)
            assert received == 2 * count
        report["loader_transfer_mib_s"] = round(2 * count * BATCH * 90 * 8 / 2**20 / best, 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.update(info.figures())
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
