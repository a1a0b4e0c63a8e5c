"""TorchParquetDataset's thread mode (decoding threads in the training process), guarantee by
guarantee, over the real Fashion-MNIST train split.

Real parts: the course store fetched from ../shared/data, torch DataLoaders (no workers, and
forked workers), the ranks of a world taken from ``RANK``/``WORLD_SIZE`` as torchrun sets
them. Nothing is mocked.
"""

from __future__ import annotations

import io
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.dirfs import DirFileSystem
from torch.utils.data import DataLoader

from scalelab.store import StoreError
from scalelab.store.streaming import TorchParquetDataset
from scalelab.store.streaming.blocks import BlockPool
from scalelab.store.streaming.threaded import plan_tasks
from tests.unit import test_streaming

#: The course store and its real train split, as test_streaming's fixtures.
store, train = test_streaming.store, test_streaming.train
#: The train split as 12 shards of 5,000 rows, row groups of 700 (the last of a shard shorter).
SHARDS = "scratch/streaming-threads/train-12"
ROWS = 60_000


@pytest.fixture(scope="module")
def shards(store: DirFileSystem, train: pa.Table) -> str:
    table = train.append_column("row", pa.array(np.arange(train.num_rows, dtype=np.int64)))
    per = train.num_rows // 12
    for i in range(12):
        with store.open(f"{SHARDS}/part-{i:05d}.parquet", "wb") as f:
            pq.write_table(table.slice(i * per, per), f, row_group_size=700)
    return SHARDS


def _rows(loader) -> np.ndarray:
    return np.concatenate([batch["row"].numpy() for batch in loader])


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("scalelab-parquet")}


def test_every_sample_once_new_order_each_epoch_real_samples(
    store: DirFileSystem, shards: str, train: pa.Table
) -> None:
    ds = TorchParquetDataset(shards, store=store, batch_size=1000, threads=2)
    loader = DataLoader(ds, batch_size=None)  # no workers: the thread mode
    epochs = [_rows(loader) for _ in range(3)]
    for order in epochs:
        assert np.array_equal(np.sort(order), np.arange(ROWS))
    assert len({order.tobytes() for order in epochs}) == 3  # three epochs, three orders
    # rows are mixed across row groups and shards, not read in runs
    first = epochs[0][:1000]
    assert len(np.unique(first // 700)) > 1 and not np.array_equal(first, np.sort(first))
    # the samples are the real ones: image and label of each row match the source
    batch = next(iter(loader))
    rows = batch["row"].numpy()
    images = train.column("image").to_numpy(zero_copy_only=False)[rows]
    assert np.array_equal(
        batch["image"].numpy(), np.frombuffer(b"".join(images), np.uint8).reshape(-1, 784)
    )
    assert np.array_equal(batch["label"].numpy(), train.column("label").to_numpy()[rows])
    assert all(len(b["row"]) == 1000 for b in loader)  # 60,000 rows re-cut into full batches
    # the default without workers is the thread mode: same guarantees
    default = TorchParquetDataset(shards, store=store, columns=["row"], batch_size=4096)
    assert np.array_equal(np.sort(_rows(DataLoader(default, batch_size=None))), np.arange(ROWS))
    assert default.stats.peak_rows_held > 0


def test_same_seed_same_order_other_seed_other_order(store: DirFileSystem, shards: str) -> None:
    def epoch(seed: int, threads: int, epoch: int = 0) -> np.ndarray:
        ds = TorchParquetDataset(
            shards, store=store, columns=["row"], batch_size=512, seed=seed, threads=threads
        )
        ds.set_epoch(epoch)
        return _rows(DataLoader(ds, batch_size=None))

    a = epoch(5, threads=2)
    assert np.array_equal(a, epoch(5, threads=2))
    assert np.array_equal(a, epoch(5, threads=3)), "the order never depends on the threads"
    assert not np.array_equal(a, epoch(6, threads=2))
    assert not np.array_equal(a, epoch(5, threads=2, epoch=1))
    unshuffled = TorchParquetDataset(
        shards, store=store, columns=["row"], shuffle=False, batch_size=999, threads=2
    )
    assert np.array_equal(_rows(DataLoader(unshuffled, batch_size=None)), np.arange(ROWS))


def test_memory_is_bounded_by_threads_and_blocks_not_the_data_set(
    store: DirFileSystem, shards: str
) -> None:
    peaks = {}
    for name, path in (("2 shards", f"{shards}/part-0000[0-1].parquet"), ("12 shards", shards)):
        ds = TorchParquetDataset(path, store=store, columns=["row"], buffer_rows=1000, threads=2)
        count = sum(1 for _ in ds)
        assert count == 5000 * (2 if name == "2 shards" else 12)
        peaks[name] = ds.stats.peak_rows_held
        assert ds.stats.rows_held == 0
    # threads + 1 blocks in flight, each under buffer_rows + one row group
    assert all(1000 <= peak <= 3 * (1000 + 700 - 1) for peak in peaks.values()), peaks
    assert peaks["12 shards"] <= peaks["2 shards"] + 700


def test_in_dataloader_workers_and_stopped_early(store: DirFileSystem, shards: str) -> None:
    ds = TorchParquetDataset(shards, store=store, columns=["row"], batch_size=1000, threads=2)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    first, second = _rows(loader), _rows(loader)
    assert np.array_equal(np.sort(first), np.arange(ROWS))
    assert np.array_equal(np.sort(second), np.arange(ROWS))
    assert not np.array_equal(first, second)
    # a loop that stops after one batch leaves no decoding thread behind
    before = _threads()
    it = iter(DataLoader(TorchParquetDataset(shards, store=store, threads=2), batch_size=None))
    next(it)
    assert _threads() - before, "the pool decodes while the batch is used"
    del it
    assert not _threads() - before


def test_ranks_from_the_environment_split_the_samples(
    store: DirFileSystem, shards: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = 3
    seen = []
    for rank in range(world):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world))
        ds = TorchParquetDataset(shards, store=store, columns=["row"], batch_size=500, threads=2)
        ds.set_epoch(4)
        assert ds.consumer().rank == rank
        seen.append(_rows(DataLoader(ds, batch_size=None)))
    assert [len(s) for s in seen] == [ROWS // world] * world
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(ROWS))  # disjoint, complete


def test_bad_input_is_named(store: DirFileSystem, shards: str) -> None:
    with pytest.raises(ValueError, match="threads must be None"):
        TorchParquetDataset(shards, store=store, threads=-1)
    with pytest.raises(StoreError, match=r"no column\(s\) \['pixels'\]"):
        next(iter(TorchParquetDataset(shards, store=store, columns=["pixels"], threads=2)))
    with pytest.raises(StoreError, match=r"column 'image' .* cannot be stacked"):
        next(iter(TorchParquetDataset(shards, store=store, stack={"x": ["image"]}, threads=2)))


def test_plan_tasks_cuts_every_row_group_once() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        groups = [list(rng.integers(0, 50, rng.integers(0, 5))) for _ in range(rng.integers(1, 6))]
        buffer_rows = int(rng.integers(1, 120))
        shuffle = bool(rng.integers(2))
        tasks = plan_tasks(groups, rng if shuffle else None, buffer_rows)
        units = [u for t in tasks for u in t.units]
        wanted = [(s, g) for s, gs in enumerate(groups) for g, n in enumerate(gs) if n]
        assert sorted(units) == wanted and (shuffle or units == wanted)
        for task in tasks:
            assert task.rows == sum(groups[s][g] for s, g in task.units)
        assert all(t.rows >= buffer_rows for t in tasks[:-1])
        # a task takes no more row groups than it needs to reach buffer_rows
        assert all(t.rows - groups[t.units[-1][0]][t.units[-1][1]] < buffer_rows for t in tasks)


def test_tf_dataset_threads_every_row_once_same_seed_same_order(
    store: DirFileSystem, shards: str
) -> None:
    from scalelab.store.streaming import tf_dataset

    def epoch(seed: int, threads: int | None) -> list[int]:
        ds = tf_dataset(shards, store=store, columns=["row"], seed=seed, threads=threads)
        # read in batches of the stream's own order (one NumPy array per row costs a minute)
        return np.concatenate([b["row"] for b in ds.batch(4096).as_numpy_iterator()]).tolist()

    a = epoch(1, threads=2)
    assert sorted(a) == list(range(ROWS))
    assert a == epoch(1, threads=3), "the order never depends on the threads"
    assert a != epoch(2, threads=2)
    assert sorted(epoch(1, threads=0)) == list(range(ROWS))  # the one-thread buffer still reads all
    with pytest.raises(ValueError, match="threads must be None"):
        tf_dataset(shards, store=store, threads="2")


def test_block_pool_reuses_only_memory_nobody_views() -> None:
    import torch

    pool = BlockPool(keep=2)
    specs = [((100, 3), np.dtype("float64")), ((100,), np.dtype("int64"))]
    x, ids = pool(specs)
    assert x.shape == (100, 3) and ids.shape == (100,) and ids.dtype == np.int64
    assert not np.shares_memory(x, ids)  # one buffer, separate arrays
    first = x.ctypes.data
    x[:] = 1.0
    held = torch.from_numpy(x[10:20])  # a batch the consumer keeps: a view of a view
    del x, ids
    y, _ = pool(specs)
    assert y.ctypes.data != first, "memory a tensor still views is never handed out again"
    y[:] = 2.0
    assert bool((held == 1.0).all())
    del held
    z, _ = pool(specs)  # both buffers kept (keep=2); the first is free again
    assert z.ctypes.data == first
    del y
    (bigger,) = pool([((500, 3), np.dtype("float64"))])  # too large for the free buffer
    assert bigger.ctypes.data != first and bigger.nbytes == 500 * 3 * 8
    # beyond ``keep`` buffers in use, new memory is allocated and not kept
    more = [pool(specs)[0] for _ in range(2)]
    assert len({a.ctypes.data for a in (z, bigger, *more)}) == 4 and len(pool._buffers) == 2
    names, empty = pool([((3,), np.dtype(object)), ((0, 2), np.dtype("float32"))])
    assert names.dtype == object and list(names) == [None] * 3 and empty.shape == (0, 2)


def test_row_groups_decoded_into_the_system_pool_read_as_parquet_file_does(
    store: DirFileSystem, shards: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scalelab.store.streaming import threaded

    path = f"{shards}/part-00003.parquet"
    with store.open(path, "rb") as f:
        footer = pq.ParquetFile(f).metadata
        expected = pq.ParquetFile(f).read_row_group(2, columns=["label", "row"])
        before = threaded.DECODE_POOL.bytes_allocated()
        table = threaded.read_row_group(f, footer, 2, ["label", "row"])
        assert threaded.DECODE_POOL.bytes_allocated() > before  # decoded into the system pool
        assert table.equals(expected) and table.column_names == ["label", "row"]
        assert threaded.read_row_group(f, footer, 2, None).num_columns == 3
        # a local store's file is read again natively (no Python call per column chunk)
        with threaded.native_file(f) as native:
            assert isinstance(native, pa.NativeFile)
            assert threaded.read_row_group(native, footer, 2, ["label", "row"]).equals(expected)
        assert native.closed
        # a file without a descriptor (as a remote store's): read through the file object
        data = io.BytesIO(store.cat_file(path))
        with threaded.native_file(data) as native:
            assert native is None
            assert threaded.read_row_group(data, footer, 2, ["label", "row"]).equals(expected)
        # a pyarrow without the private reader: ParquetFile, the same table
        monkeypatch.setattr(threaded, "_ParquetReader", None)
        assert threaded.read_row_group(f, footer, 2, ["label", "row"]).equals(expected)
