"""Benchmark: ScaleLab's Parquet readers against the usual ways to feed PyTorch, on the same shards.

The script writes, into a temporary folder (never the repository), Parquet shards of two
schemas with an ``id`` column (the row's global index):

- ``msd``: the Million Song schema, ``year`` + 90 float64 features ``f01`` .. ``f90``;
- ``fmnist``: Fashion-MNIST shaped, ``image`` (``fixed_size_binary[784]``, 28x28 uint8) + ``label``;

1 GiB and 4 GiB of each (``--quick``: 48 and 160 MiB), uncompressed, 64 MiB shards of 8 MiB
row groups (``--quick``: 16 MiB shards of 4 MiB row groups). Each contender reads one shuffled
epoch of a set as torch batches of 4096 rows (MSD: a ``(rows, 90)`` float64 tensor and the
years; Fashion-MNIST: a ``(rows, 784)`` uint8 tensor and the labels), in a child process of its
own:

- ``scalelab_threads``: :class:`scalelab.store.streaming.TorchParquetDataset` in its thread mode
  (the default: ``DataLoader(num_workers=0)``, decoding threads inside);
- ``scalelab_processes``: the same with ``DataLoader(num_workers=2)`` worker processes;
- ``pyarrow_iterable``: a hand-written ``IterableDataset``: ``ParquetFile.iter_batches(4096)``
  over the worker's files in a shuffled order, rows permuted within each batch, 2 workers;
- ``torchdata_nodes``: torchdata nodes, ``ParallelMapper`` with 2 threads decoding row groups
  (pyarrow, GIL released) in a new random order each epoch, rows permuted within each group,
  re-cut into batches of 4096, through ``torchdata.nodes.Loader``;
- ``hf_streaming``: Hugging Face ``datasets``: ``load_dataset("parquet", streaming=True)``,
  ``.shuffle(buffer_size=16384)``, ``.with_format("arrow").iter(batch_size=4096)`` (Arrow
  tables: no per-value conversion; NumPy format would turn float64 into float32);
- ``decode_limit``: not a reader, the bound: every row group decoded by pyarrow on 2 threads,
  nothing else (no shuffle, no tensors).

Rounds alternate the contenders (3 rounds, ``--quick``: 2). Prints one JSON object; for each
``<schema>_<size>`` and contender (medians over the rounds): ``samples_s``, ``mib_s`` (bytes
on disk per second), ``first_batch_s`` (from the dataset's creation to the first batch),
``peak_pss_mib`` (the largest PSS summed over the child and its workers, read every 250 ms
and at the first and last batch, the largest over the rounds), ``cpu_s`` (user + system of
the child and its workers for the epoch), ``exactly_once`` (every id seen exactly once, in
every round); ``ratios``: ScaleLab's threads' samples/s over each peer's (the median of the
per-round ratios), and ``vs_decode_limit``. Peers not installed are ``skipped`` with the
command that installs them; they are benchmark-only, never ScaleLab dependencies:
``.venv/bin/pip install torchdata==0.11.0 datasets==5.2.0``. The load average at the start and
end (``load_avg_at_start``, ``load_avg_at_end``) says how busy the machine was.

Each set's figures also go to stderr as soon as they are measured (a full run takes long).

Usage: ``.venv/bin/python bench/stream_peers.py [--quick] [--tmp DIR] [--only NAME,...]
[--schemas msd,fmnist] [--sizes 1g,4g]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import PeakMemory, RunInfo, own_cpu_seconds, run_measured

BATCH = 4096
FEATURES = [f"f{i:02d}" for i in range(1, 91)]
PIXELS = 784
#: Bytes a row of each schema takes (id included).
ROW_BYTES = {"msd": 92 * 8, "fmnist": PIXELS + 16}
SHARD_BYTES = {False: 64 * 2**20, True: 16 * 2**20}
ROW_GROUP_BYTES = {False: 8 * 2**20, True: 4 * 2**20}
CONTENDERS = [
    "scalelab_threads",
    "scalelab_processes",
    "pyarrow_iterable",
    "torchdata_nodes",
    "hf_streaming",
    "decode_limit",
]
PEERS_NEED = {"torchdata_nodes": "torchdata", "hf_streaming": "datasets"}
INSTALL_HINT = ".venv/bin/pip install torchdata==0.11.0 datasets==5.2.0"


def write_shards(folder: Path, schema: str, total_bytes: int, quick: bool) -> int:
    """Write ``total_bytes`` of synthetic rows of ``schema``; returns bytes on disk."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(len(schema) + total_bytes % 101)
    rows = SHARD_BYTES[quick] // ROW_BYTES[schema]
    group = ROW_GROUP_BYTES[quick] // ROW_BYTES[schema]
    for index in range(max(1, total_bytes // SHARD_BYTES[quick])):
        ids = np.arange(index * rows, (index + 1) * rows, dtype=np.int64)
        if schema == "msd":
            columns = {"id": ids, "year": rng.integers(1922, 2012, rows).astype(np.float64)}
            block = rng.standard_normal((len(FEATURES), rows))
            columns.update({name: block[i] for i, name in enumerate(FEATURES)})
            table = pa.table(columns)
        else:
            pixels = rng.integers(0, 256, rows * PIXELS, dtype=np.uint8)
            image = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(PIXELS), rows, [None, pa.py_buffer(pixels)]
            )
            labels = pa.array(rng.integers(0, 10, rows))
            table = pa.table({"id": ids, "image": image, "label": labels})
        pq.write_table(
            table,
            folder / f"part-{index:05d}.parquet",
            compression="none",
            use_dictionary=False,
            row_group_size=group,
        )
    return sum(p.stat().st_size for p in folder.iterdir())


# --- the contenders, each run in a child process: yield (ids, x, y) torch batches ---


def _scalelab(folder: Path, schema: str, workers: int):
    import torch.utils.data

    from scalelab.store import open_store
    from scalelab.store.streaming import TorchParquetDataset

    stack = {"features": FEATURES} if schema == "msd" else None
    ds = TorchParquetDataset(
        folder.name, store=open_store(folder.parent.as_uri()), batch_size=BATCH, stack=stack
    )
    x, y = ("features", "year") if schema == "msd" else ("image", "label")
    for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers):
        yield b["id"], b[x], b[y]


def _arrays(batch: pa.RecordBatch, schema: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ids = batch.column("id").to_numpy()
    if schema == "msd":
        x = np.column_stack([batch.column(n).to_numpy() for n in FEATURES])
        return ids, x, batch.column("year").to_numpy()
    image = batch.column("image")
    flat = np.frombuffer(image.buffers()[1], np.uint8)[image.offset * PIXELS :]
    x = flat[: len(image) * PIXELS].reshape(len(image), PIXELS)
    return ids, x, batch.column("label").to_numpy()


class PyarrowIterable:
    """The hand-written pattern: files dealt to workers, iter_batches, permuted per batch."""

    def __init__(self, files: list[Path], schema: str, seed: int = 0) -> None:
        self.files, self.schema, self.seed = files, schema, seed

    def __iter__(self):
        import torch
        import torch.utils.data

        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        rng = np.random.default_rng([self.seed, worker])
        order = np.random.default_rng(self.seed).permutation(len(self.files))
        for i in order[worker::workers]:
            for batch in pq.ParquetFile(self.files[i]).iter_batches(batch_size=BATCH):
                perm = rng.permutation(batch.num_rows)
                ids, x, y = _arrays(batch, self.schema)
                yield tuple(torch.from_numpy(a[perm]) for a in (ids, x, y))


def _pyarrow_iterable(folder: Path, schema: str):
    import torch.utils.data

    class Dataset(PyarrowIterable, torch.utils.data.IterableDataset):
        pass

    files = sorted(folder.glob("*.parquet"))
    yield from torch.utils.data.DataLoader(Dataset(files, schema), batch_size=None, num_workers=2)


def _torchdata_nodes(folder: Path, schema: str):
    import torch
    from torchdata.nodes import IterableWrapper, Loader, ParallelMapper

    files = sorted(folder.glob("*.parquet"))
    units = [(f, g) for f in files for g in range(pq.ParquetFile(f).num_row_groups)]
    rng = np.random.default_rng(0)
    order = [units[i] for i in rng.permutation(len(units))]
    seeds = rng.integers(2**32, size=len(order))

    def decode(item):
        (path, group), seed = item
        table = pq.ParquetFile(path).read_row_group(group, use_threads=False)
        ids, x, y = _arrays(table.combine_chunks().to_batches()[0], schema)
        perm = np.random.default_rng(seed).permutation(len(ids))
        return ids[perm], x[perm], y[perm]

    node = ParallelMapper(
        IterableWrapper(list(zip(order, seeds, strict=True))),
        decode,
        num_workers=2,
        method="thread",
        in_order=True,
    )
    carry = None
    for ids, x, y in Loader(node):
        if carry is not None:
            ids, x, y = (np.concatenate([c, n]) for c, n in zip(carry, (ids, x, y), strict=True))
        full = len(ids) // BATCH * BATCH
        for s in range(0, full, BATCH):
            yield tuple(torch.from_numpy(a[s : s + BATCH]) for a in (ids, x, y))
        carry = (ids[full:], x[full:], y[full:]) if full < len(ids) else None
    if carry is not None:
        yield tuple(torch.from_numpy(a) for a in carry)


def _hf_streaming(folder: Path, schema: str):
    # Offline: this machine reaches no network, and the Hub's look-ups would only wait.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets
    import torch

    datasets.disable_progress_bars()
    files = [str(p) for p in sorted(folder.glob("*.parquet"))]
    ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
    ds = ds.shuffle(seed=0, buffer_size=16384).with_format("arrow")
    for table in ds.iter(batch_size=BATCH):
        ids, x, y = _arrays(table.combine_chunks().to_batches()[0], schema)
        yield torch.from_numpy(ids), torch.from_numpy(x), torch.from_numpy(y)


def _decode_limit(folder: Path, schema: str):
    import concurrent.futures

    import torch

    files = sorted(folder.glob("*.parquet"))
    units = [(f, g) for f in files for g in range(pq.ParquetFile(f).num_row_groups)]

    def decode(unit):
        table = pq.ParquetFile(unit[0]).read_row_group(unit[1], use_threads=False)
        return table.column("id").to_numpy()

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for ids in pool.map(decode, units):
            yield torch.from_numpy(ids), None, None


READERS = {
    "scalelab_threads": lambda f, s: _scalelab(f, s, 0),
    "scalelab_processes": lambda f, s: _scalelab(f, s, 2),
    "pyarrow_iterable": _pyarrow_iterable,
    "torchdata_nodes": _torchdata_nodes,
    "hf_streaming": _hf_streaming,
    "decode_limit": _decode_limit,
}


def child(name: str, folder: Path, schema: str) -> dict:
    import torch

    expected = sum(pq.read_metadata(p).num_rows for p in folder.glob("*.parquet"))
    shapes = {"msd": ((len(FEATURES),), torch.float64), "fmnist": ((PIXELS,), torch.uint8)}
    sampler = PeakMemory()
    sampler.start()
    cpu0 = sum(own_cpu_seconds())
    start = time.perf_counter()
    first = None
    seen = []
    rows = 0
    for ids, x, _ in READERS[name](folder, schema):
        if first is None:
            first = time.perf_counter() - start
            sampler.sample()
        if x is not None:
            assert (tuple(x.shape[1:]), x.dtype) == shapes[schema], (x.shape, x.dtype)
            assert len(x) == len(ids) <= BATCH, (len(x), len(ids))
        seen.append(ids.numpy().copy())
        rows += len(ids)
        if rows == expected:
            sampler.sample()
    seconds = time.perf_counter() - start
    sampler.stop()
    import gc

    gc.collect()  # DataLoader workers joined: their CPU time is in RUSAGE_CHILDREN
    cpu = sum(own_cpu_seconds()) - cpu0
    ids = np.concatenate(seen) if seen else np.array([], np.int64)
    once = len(ids) == expected and np.array_equal(np.sort(ids), np.arange(expected))
    return {
        "seconds": seconds,
        "first_batch_s": first,
        "cpu_s": cpu,
        "rows": len(ids),
        "exactly_once": bool(once),
        "peak_pss": sampler.peak_pss,
        "processes": len(sampler.processes_seen),
    }


def missing_peer(name: str) -> str | None:
    module = PEERS_NEED.get(name)
    if module is None or importlib.util.find_spec(module) is not None:
        return None
    return f"{module} is not installed (benchmark-only peer): {INSTALL_HINT}"


def summarise(runs: dict[str, list[dict]], on_disk: int) -> dict:
    out: dict = {}
    for name, rounds in runs.items():
        if not rounds or "error" in rounds[0]:
            out[name] = rounds[0] if rounds else {"skipped": "no run"}
            continue
        seconds = statistics.median(r["seconds"] for r in rounds)
        out[name] = {
            "samples_s": round(statistics.median(r["rows"] / r["seconds"] for r in rounds)),
            "mib_s": round(on_disk / 2**20 / seconds, 1),
            "first_batch_s": round(statistics.median(r["first_batch_s"] for r in rounds), 3),
            "peak_pss_mib": round(max(r["peak_pss"] for r in rounds) / 2**20, 1),
            "cpu_s": round(statistics.median(r["cpu_s"] for r in rounds), 2),
            "exactly_once": all(r["exactly_once"] for r in rounds),
            "processes": max(r["processes"] for r in rounds),
            "rounds": len(rounds),
        }
    base = runs.get("scalelab_threads") or []
    ratios = {}
    for name, rounds in runs.items():
        if name == "scalelab_threads" or not rounds or "error" in rounds[0] or not base:
            continue
        if "error" in base[0]:
            continue
        per_round = [
            (b["rows"] / b["seconds"]) / (r["rows"] / r["seconds"])
            for b, r in zip(base, rounds, strict=False)
        ]
        key = "vs_decode_limit" if name == "decode_limit" else name
        ratios[key] = round(statistics.median(per_round), 3)
    out["scalelab_threads_speed_over"] = ratios
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="48 and 160 MiB, 2 rounds")
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the shards")
    parser.add_argument("--only", default="", help="comma-separated contenders to run")
    parser.add_argument("--schemas", default="msd,fmnist", help="comma-separated: msd, fmnist")
    parser.add_argument("--sizes", default="1g,4g", help="comma-separated: 1g, 4g")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, folder, schema = args.child
        print(json.dumps(child(name, Path(folder), schema)))
        return

    info = RunInfo()
    sizes = {"1g": 48 * 2**20, "4g": 160 * 2**20} if args.quick else {"1g": 2**30, "4g": 2**32}
    sizes = {k: v for k, v in sizes.items() if k in args.sizes.split(",")}
    rounds = 2 if args.quick else 3
    names = [n for n in CONTENDERS if not args.only or n in args.only.split(",")]
    report: dict = {"quick": args.quick, "rounds": rounds, "batch_size": BATCH, "skipped": {}}
    for name in names:
        why = missing_peer(name)
        if why:
            report["skipped"][name] = why
    names = [n for n in names if n not in report["skipped"]]
    tmp = Path(tempfile.mkdtemp(prefix="scalelab-bench-peers-", dir=args.tmp))
    try:
        for schema in args.schemas.split(","):
            for label, size in sizes.items():
                folder = tmp / f"{schema}-{label}"
                on_disk = write_shards(folder, schema, size, args.quick)
                runs: dict[str, list[dict]] = {n: [] for n in names}
                for r in range(rounds):
                    # alternate: each round starts from another contender
                    for name in names[r % len(names) :] + names[: r % len(names)]:
                        if runs[name] and "error" in runs[name][0]:
                            continue
                        done = run_measured(
                            [sys.executable, __file__, "--child", name, str(folder), schema],
                            check=False,
                        )
                        if done.returncode != 0:
                            tail = done.stderr_tail.strip().splitlines()[-1:]
                            runs[name] = [{"error": tail[0] if tail else f"rc {done.returncode}"}]
                            continue
                        runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
                key = f"{schema}_{label}"
                report[key] = summarise(runs, on_disk)
                report[key]["data_mib"] = round(on_disk / 2**20, 1)
                report[key]["samples"] = next(
                    (r[0]["rows"] for r in runs.values() if r and "rows" in r[0]), None
                )
                print(json.dumps({key: report[key]}), file=sys.stderr, flush=True)  # progress
                shutil.rmtree(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.update(info.figures())
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
