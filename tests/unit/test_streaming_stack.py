"""TorchParquetDataset's ``stack`` and ``float_dtype`` options, on the real Million Song subset.

Real parts: the course store fetched from ../shared/data, the subset's real rows re-written as
shards with a row index, torch DataLoaders with forked workers. Nothing is mocked. The pure
block assembly (scalelab.store.streaming.blocks) is checked against NumPy directly.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from fsspec.implementations.dirfs import DirFileSystem
from torch.utils.data import DataLoader

from scalelab.store import StoreError, open_store
from scalelab.store.streaming import TorchParquetDataset, blocks
from scalelab.store.streaming.blocks import BlockLayout, build_block
from scalelab.store.streaming.shared_batches import as_tensor, shared_empty

SOURCE = "datasets/millionsong/parquet"
#: The subset re-written as 8 shards (row groups of 200 rows) with a ``row`` column.
SHARDS = "scratch/streaming-stack/millionsong-8"
FEATURES = [f"f{i:02d}" for i in range(1, 13)]


@pytest.fixture(scope="module")
def store(course_store: str) -> DirFileSystem:
    return open_store(course_store)


@pytest.fixture(scope="module")
def songs(store: DirFileSystem) -> pa.Table:
    """The real 6,724-row subset: ``year`` and ``f01`` .. ``f12``, float64."""
    return pa.concat_tables(
        pq.read_table(store.open(p, "rb")) for p in sorted(store.glob(f"{SOURCE}/*.parquet"))
    )


@pytest.fixture(scope="module")
def shards(store: DirFileSystem, songs: pa.Table) -> str:
    table = songs.append_column("row", pa.array(np.arange(songs.num_rows, dtype=np.int64)))
    per = -(-table.num_rows // 8)
    for i in range(8):
        with store.open(f"{SHARDS}/part-{i:05d}.parquet", "wb") as f:
            pq.write_table(table.slice(i * per, per), f, row_group_size=200)
    return SHARDS


def _features(songs: pa.Table) -> np.ndarray:
    return np.column_stack([songs.column(n).to_numpy() for n in FEATURES])


def _epoch(loader: DataLoader) -> dict[str, np.ndarray]:
    batches = list(loader)
    return {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}


def test_stacked_features_every_row_once_new_order_each_epoch(
    store: DirFileSystem, shards: str, songs: pa.Table
) -> None:
    ds = TorchParquetDataset(shards, store=store, batch_size=500, stack={"features": FEATURES})
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    batch = next(iter(DataLoader(ds, batch_size=None, num_workers=2)))
    assert list(batch) == ["year", "row", "features"]
    x = batch["features"]
    assert isinstance(x, torch.Tensor) and x.dtype == torch.float64
    assert x.shape == (500, 12) and x.is_contiguous()
    assert x.is_shared()  # built in the worker's shared memory, not copied there afterwards
    assert batch["year"].shape == (500,) and batch["row"].dtype == torch.int64

    expected = _features(songs)
    years = songs.column("year").to_numpy()
    epochs = [_epoch(loader) for _ in range(2)]
    for epoch in epochs:
        assert np.array_equal(np.sort(epoch["row"]), np.arange(songs.num_rows))
        # every array of a batch went through the same permutation: rows stay whole
        assert np.array_equal(epoch["features"], expected[epoch["row"]])
        assert np.array_equal(epoch["year"], years[epoch["row"]])
    assert not np.array_equal(epochs[0]["row"], epochs[1]["row"])
    # without workers: the same rows, batches share NumPy's memory (no shared segment)
    alone = _epoch(DataLoader(ds, batch_size=None))
    assert np.array_equal(alone["features"], expected[alone["row"]])


def test_float32_and_columns(store: DirFileSystem, shards: str, songs: pa.Table) -> None:
    ds = TorchParquetDataset(
        shards,
        store=store,
        columns=["year", "row"],  # stacked columns are read even when not listed
        batch_size=1000,
        stack={"x": FEATURES[::-1]},
        float_dtype="float32",
        shuffle=False,
    )
    epoch = _epoch(DataLoader(ds, batch_size=None, num_workers=2))
    assert epoch["x"].dtype == np.float32 and epoch["year"].dtype == np.float32
    assert epoch["row"].dtype == np.int64  # integers keep their type
    assert np.array_equal(np.sort(epoch["row"]), np.arange(songs.num_rows))
    expected = _features(songs)[:, ::-1].astype(np.float32)  # the stack's order, cast once
    assert np.array_equal(epoch["x"], expected[epoch["row"]])
    # one row at a time: the stack is a (k,) array
    row = next(iter(TorchParquetDataset(shards, store=store, stack={"x": FEATURES})))
    assert row["x"].shape == (12,) and set(row) == {"year", "row", "x"}


def test_bad_stack_or_dtype_is_named(store: DirFileSystem, shards: str) -> None:
    with pytest.raises(ValueError, match="float_dtype must be None or one of float16"):
        TorchParquetDataset(shards, store=store, float_dtype="float8")
    with pytest.raises(ValueError, match=r"column\(s\) \['f01'\] stacked twice"):
        TorchParquetDataset(shards, store=store, stack={"a": ["f01"], "b": ["f01", "f02"]})
    with pytest.raises(ValueError, match=r"stack\['a'\] must be a non-empty list"):
        TorchParquetDataset(shards, store=store, stack={"a": "f01"})
    with pytest.raises(StoreError, match=r"no column\(s\) \['f99'\] to stack"):
        next(iter(TorchParquetDataset(shards, store=store, stack={"x": ["f01", "f99"]})))
    with pytest.raises(StoreError, match="stack key 'year' is also a column's name"):
        next(iter(TorchParquetDataset(shards, store=store, stack={"year": ["f01"]})))
    images = "datasets/fashion-mnist/parquet/test"
    with pytest.raises(StoreError, match=r"column 'image' .* cannot be stacked"):
        next(iter(TorchParquetDataset(images, store=store, stack={"x": ["image", "label"]})))


def test_build_block_permutes_columns_and_stacks_alike() -> None:
    rng = np.random.default_rng(3)
    parts = []
    for size in (5, 7, 4):
        rows = rng.standard_normal((size, 3))
        parts.append({"id": rng.integers(0, 1000, size), "x": rows})
    destination = rng.permutation(16)
    layout = BlockLayout.build(float_dtype="float32")
    block = build_block(parts, destination, layout)
    ids = np.concatenate([p["id"] for p in parts])
    xs = np.concatenate([p["x"] for p in parts])
    assert np.array_equal(block["id"][destination], ids) and block["id"].dtype == ids.dtype
    assert block["x"].dtype == np.float32
    assert np.array_equal(block["x"][destination], xs.astype(np.float32))
    assert np.array_equal(build_block(parts, None, BlockLayout())["x"], xs)


@pytest.mark.parametrize("scratch_rows", [1, 3, 64])
def test_a_permuted_stack_is_written_through_the_scratch_row_by_row_alike(
    scratch_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two reads written into one permuted float32 block through scratches of 1, 3 (the 10
    and 7 rows of the reads in several pieces) and 64 rows (one piece): every row lands where
    the permutation says, cast once, and the unstacked column with it."""
    rng = np.random.default_rng(5)
    members = [f"f{i}" for i in range(4)]
    layout = BlockLayout.build({"x": members}, "float32")
    monkeypatch.setattr(blocks, "SCATTER_BYTES", scratch_rows * len(members) * 4)
    reads = [
        {"id": np.arange(start, start + size), **{m: rng.standard_normal(size) for m in members}}
        for start, size in ((0, 10), (10, 7))
    ]
    destination = rng.permutation(17)
    block = blocks.empty_column_block(reads[0], 17, layout, blocks.empty_arrays)
    start = 0
    for read in reads:
        start = blocks.write_columns(block, read, layout, start, destination)
    assert start == 17
    expected = np.concatenate([np.stack([r[m] for m in members], axis=1) for r in reads])
    assert block["x"].dtype == np.float32
    assert np.array_equal(block["x"][destination], expected.astype(np.float32))
    assert np.array_equal(block["id"][destination], np.arange(17))


def test_shared_arrays_become_tensors_over_one_segment() -> None:
    x, y, none = shared_empty([((6, 4), np.float64), ((6,), np.int32), ((0,), np.float64)])
    x[:] = np.arange(24).reshape(6, 4)
    y[:] = np.arange(6)
    tx, ty = as_tensor(x[2:5]), as_tensor(y[2:5])
    assert tx.is_shared() and ty.is_shared()
    assert tx.untyped_storage().data_ptr() == ty.untyped_storage().data_ptr()  # one segment
    assert tx.tolist() == x[2:5].tolist() and ty.tolist() == [2, 3, 4]
    x[2, 0] = -1.0
    assert tx[0, 0] == -1.0  # a view, never a copy
    assert none.shape == (0,) and not as_tensor(none).is_shared()
    strings = np.array(["a", "b"], dtype=object)
    assert as_tensor(strings) is strings  # no torch type: stays NumPy
