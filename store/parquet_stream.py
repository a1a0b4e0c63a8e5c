"""Reading Parquet shards from an fsspec file system in bounded memory, with a shuffle buffer.

Memory: at most ``shards_in_memory`` shards are open at once, each holding at most one decoded
row group (pyarrow reads a row group at a time), and the shuffle buffer holds at most
``buffer_rows + read_rows - 1`` rows. Nothing depends on the number or the total size of the
shards.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from scalelab.store.errors import StoreError
from scalelab.store.shard_plan import is_glob

#: Default rows of the shuffle buffer.
DEFAULT_BUFFER_ROWS = 8192
#: Default rows read from a shard at a time.
DEFAULT_READ_ROWS = 1024


def list_shards(fs: fsspec.AbstractFileSystem, path: str, suffix: str) -> list[str]:
    """The shard files under ``path`` in ``fs``, sorted.

    Parameters
    ----------
    fs
        The store (paths relative to its root).
    path
        A folder (every file below it ending in ``suffix``), a glob pattern, or one file.
    suffix
        ``".parquet"`` or ``".tfrecord"``; files starting with ``.`` or ``_`` (temporary files,
        ``_SUCCESS``) are left out of folders.

    Raises
    ------
    StoreError
        Nothing matches: the message names the path and the store.
    """
    path = path.rstrip("/")
    if is_glob(path):
        found = [p for p in fs.glob(path) if fs.isfile(p)]
    elif fs.isdir(path):
        found = [
            p
            for p in fs.find(path)
            if p.endswith(suffix) and not p.rsplit("/", 1)[-1].startswith((".", "_"))
        ]
    elif fs.isfile(path):
        found = [path]
    else:
        found = []
    if not found:
        raise StoreError(
            f"no {suffix} shards at {path!r} in the store ({fs!r}): give a folder of shards, "
            "a glob such as 'datasets/name/parquet/*.parquet', or one file; "
            "`scalelab data fetch NAME` puts the course data sets there."
        )
    return sorted(found)


@dataclass
class BufferStats:
    """Rows held by a reader in this process: ``rows_held`` now, ``peak_rows_held`` ever."""

    rows_held: int = 0
    peak_rows_held: int = 0

    def add(self, rows: int) -> None:
        self.rows_held += rows
        self.peak_rows_held = max(self.peak_rows_held, self.rows_held)


def _open_batches(
    fs: fsspec.AbstractFileSystem, shard: str, columns: Sequence[str] | None, read_rows: int
) -> Iterator[pa.RecordBatch]:
    with fs.open(shard, "rb") as f:
        parquet = pq.ParquetFile(f)
        if columns is not None:
            missing = [c for c in columns if c not in parquet.schema_arrow.names]
            if missing:
                raise StoreError(
                    f"{shard}: no column(s) {missing}; it has {parquet.schema_arrow.names}"
                )
        yield from parquet.iter_batches(batch_size=read_rows, columns=columns)


def iter_shuffled(
    fs: fsspec.AbstractFileSystem,
    shards: Sequence[str],
    *,
    columns: Sequence[str] | None,
    rng: np.random.Generator | None,
    buffer_rows: int = DEFAULT_BUFFER_ROWS,
    read_rows: int = DEFAULT_READ_ROWS,
    shards_in_memory: int = 2,
    stats: BufferStats | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Stream ``shards`` as column blocks, shuffled within a bounded buffer.

    Parameters
    ----------
    rng
        None reads the shards one after another in order, unshuffled. Otherwise batches of
        ``read_rows`` rows are drawn from ``shards_in_memory`` open shards at random, collected
        until the buffer holds ``buffer_rows`` rows, and the buffer's rows are permuted.

    Yields
    ------
    dict
        Column name -> NumPy array whose first axis is the rows of one buffer (see
        :func:`table_columns`). The caller must drop a block before asking for the next for the
        memory bound to hold.
    """
    stats = stats if stats is not None else BufferStats()
    pending = iter(shards)
    width = 1 if rng is None else max(1, shards_in_memory)
    cursors: list[Iterator[pa.RecordBatch]] = []
    for shard in pending:
        cursors.append(_open_batches(fs, shard, columns, read_rows))
        if len(cursors) == width:
            break
    buffer: list[pa.RecordBatch] = []
    try:
        while cursors:
            index = 0 if rng is None else int(rng.integers(len(cursors)))
            batch = next(cursors[index], None)
            if batch is None:
                cursors.pop(index).close()
                nxt = next(pending, None)
                if nxt is not None:
                    cursors.insert(index, _open_batches(fs, nxt, columns, read_rows))
                continue
            if batch.num_rows == 0:
                continue
            buffer.append(batch)
            stats.add(batch.num_rows)
            if stats.rows_held >= buffer_rows:
                yield _drain(buffer, rng, stats)
        if buffer:
            yield _drain(buffer, rng, stats)
    finally:
        for cursor in cursors:
            cursor.close()


def _drain(
    buffer: list[pa.RecordBatch], rng: np.random.Generator | None, stats: BufferStats
) -> dict[str, np.ndarray]:
    table = pa.Table.from_batches(buffer)
    buffer.clear()
    stats.rows_held = 0
    columns = table_columns(table)
    if rng is not None:
        perm = rng.permutation(table.num_rows)
        columns = {name: values[perm] for name, values in columns.items()}
    return columns


def table_columns(table: pa.Table) -> dict[str, np.ndarray]:
    """A table's columns as NumPy arrays, rows first.

    ``fixed_size_binary[w]`` columns (such as Fashion-MNIST's ``image``) become uint8 arrays of
    shape ``(rows, w)``; numeric and boolean columns their NumPy dtype, shape ``(rows,)``; any
    other type an object array of Python values.

    Raises
    ------
    StoreError
        A fixed-size binary column has nulls (there is no array value for a missing image).
    """
    out: dict[str, np.ndarray] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        arr = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        if pa.types.is_fixed_size_binary(arr.type):
            if arr.null_count:
                raise StoreError(f"column {name!r} has {arr.null_count} null value(s)")
            width = arr.type.byte_width
            data = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
            start = arr.offset * width
            out[name] = data[start : start + len(arr) * width].reshape(len(arr), width)
        elif pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
            out[name] = arr.to_numpy(zero_copy_only=False)
        elif pa.types.is_boolean(arr.type):
            out[name] = arr.to_numpy(zero_copy_only=False)
        else:
            out[name] = np.array(arr.to_pylist(), dtype=object)
    return out


def iter_rows(blocks: Iterator[dict[str, np.ndarray]]) -> Iterator[dict[str, object]]:
    """Rows of column blocks: column -> NumPy scalar, or a uint8 array (copied) for 2-D columns."""
    for block in blocks:
        names = list(block)
        arrays = [block[n] for n in names]
        n = len(arrays[0]) if arrays else 0
        copy = [a.ndim > 1 for a in arrays]
        for i in range(n):
            yield {
                name: (a[i].copy() if c else a[i])
                for name, a, c in zip(names, arrays, copy, strict=True)
            }


def iter_batches(
    blocks: Iterator[dict[str, np.ndarray]], batch_size: int
) -> Iterator[dict[str, np.ndarray]]:
    """Re-cut column blocks into batches of ``batch_size`` rows (the last may be shorter)."""
    carry: dict[str, np.ndarray] | None = None
    for block in blocks:
        if carry is not None:
            block = {k: np.concatenate([carry[k], v]) for k, v in block.items()}
            carry = None
        n = len(next(iter(block.values()))) if block else 0
        full = n - n % batch_size
        for start in range(0, full, batch_size):
            yield {k: v[start : start + batch_size] for k, v in block.items()}
        if full < n:
            carry = {k: v[full:].copy() for k, v in block.items()}
    if carry is not None:
        yield carry
