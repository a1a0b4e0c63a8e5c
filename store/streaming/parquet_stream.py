"""Reading Parquet shards from an fsspec file system in bounded memory, with a shuffle buffer.

Memory: at most ``shards_in_memory`` shards are open at once, each holding at most one decoded
row group (pyarrow reads a row group at a time), and the shuffle buffer holds at most
``buffer_rows + read_rows - 1`` rows. While a full buffer becomes a block, its rows are held
up to three times (the Arrow reads, stacked columns laid out row-major, the block); a block
lives until its last batch is dropped. Nothing depends on the number or the total size of the
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
from scalelab.store.streaming.blocks import (
    Allocator,
    BlockLayout,
    build_block,
    empty_arrays,
    stack_columns,
    stacked_dtype,
)
from scalelab.store.streaming.shard_plan import is_glob

#: Default rows of the shuffle buffer.
DEFAULT_BUFFER_ROWS = 16384
#: Default rows read from a shard at a time: None sizes each read to about ``READ_BYTES``.
DEFAULT_READ_ROWS = None
#: Uncompressed bytes a read aims at when ``read_rows`` is None (fewer, larger reads of wide
#: tables; pyarrow's per-batch cost is per column).
READ_BYTES = 4 * 2**20


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


def auto_read_rows(metadata: pq.FileMetaData, columns: Sequence[str] | None) -> int:
    """Rows per read of about :data:`READ_BYTES` uncompressed, from a shard's footer."""
    total_rows = metadata.num_rows
    if not total_rows:
        return 1
    wanted = None if columns is None else set(columns)
    size = 0
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if wanted is None or chunk.path_in_schema.split(".")[0] in wanted:
                size += chunk.total_uncompressed_size
    row_bytes = max(1, size // total_rows)
    return max(1, min(total_rows, READ_BYTES // row_bytes))


def check_columns(
    names: Sequence[str], columns: Sequence[str] | None, layout: BlockLayout, shard: str
) -> None:
    """Refuse ``columns`` or a ``layout`` that shard ``shard``, of columns ``names``, lacks.

    Raises
    ------
    StoreError
        A column of ``columns`` is neither in ``names`` nor stacked; or see
        :meth:`~scalelab.store.streaming.blocks.BlockLayout.check_names`.
    """
    if columns is not None:
        missing = [c for c in columns if c not in names and c not in layout.stacked]
        if missing:
            raise StoreError(f"{shard}: no column(s) {missing}; it has {list(names)}")
    layout.check_names(names, shard)


def _open_batches(
    fs: fsspec.AbstractFileSystem,
    shard: str,
    columns: Sequence[str] | None,
    read_rows: int | None,
    layout: BlockLayout,
) -> Iterator[pa.RecordBatch]:
    with fs.open(shard, "rb") as f:
        # pre_buffer=False: pyarrow would also hold a coalesced copy of the row group's raw
        # bytes (twice the memory per open shard); the store's own read-ahead serves remote
        # stores (s3fs's blocks; on hdfs://, scalelab.store.access.readahead's).
        parquet = pq.ParquetFile(f, pre_buffer=False)
        check_columns(parquet.schema_arrow.names, columns, layout, shard)
        columns = layout.read_columns(columns)
        rows = read_rows if read_rows is not None else auto_read_rows(parquet.metadata, columns)
        # use_threads=False: a DataLoader worker is a process already; pyarrow's threads cost
        # more CPU than they save there (about 30 % more per byte, measured).
        yield from parquet.iter_batches(batch_size=rows, columns=columns, use_threads=False)


def iter_shuffled(
    fs: fsspec.AbstractFileSystem,
    shards: Sequence[str],
    *,
    columns: Sequence[str] | None,
    rng: np.random.Generator | None,
    buffer_rows: int = DEFAULT_BUFFER_ROWS,
    read_rows: int | None = DEFAULT_READ_ROWS,
    shards_in_memory: int = 2,
    stats: BufferStats | None = None,
    layout: BlockLayout | None = None,
    empty: Allocator = empty_arrays,
) -> Iterator[dict[str, np.ndarray]]:
    """Stream ``shards`` as column blocks, shuffled within a bounded buffer.

    Parameters
    ----------
    columns
        Columns to read; None reads all. Stacked columns (``layout``) are read in any case.
    read_rows
        Rows read from a shard at a time; None sizes reads to about :data:`READ_BYTES`.
    rng
        None reads the shards one after another in order, unshuffled. Otherwise batches of
        ``read_rows`` rows are drawn from ``shards_in_memory`` open shards at random, collected
        until the buffer holds ``buffer_rows`` rows, and the buffer's rows are permuted.
    layout
        Stacked columns and float type of the blocks (:class:`~.blocks.BlockLayout`);
        None: every column on its own, in its own type.
    empty
        Allocates the blocks' arrays (see :func:`~scalelab.store.streaming.blocks.build_block`).

    Yields
    ------
    dict
        Column name -> NumPy array whose first axis is the rows of one buffer (see
        :func:`table_columns`; stacks: ``(rows, k)``). The caller must drop a block before
        asking for the next for the memory bound to hold.
    """
    stats = stats if stats is not None else BufferStats()
    layout = layout if layout is not None else BlockLayout()
    pending = iter(shards)
    width = 1 if rng is None else max(1, shards_in_memory)
    cursors: list[Iterator[pa.RecordBatch]] = []
    for shard in pending:
        cursors.append(_open_batches(fs, shard, columns, read_rows, layout))
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
                    cursors.insert(index, _open_batches(fs, nxt, columns, read_rows, layout))
                continue
            if batch.num_rows == 0:
                continue
            buffer.append(batch)
            stats.add(batch.num_rows)
            if stats.rows_held >= buffer_rows:
                yield _drain(buffer, rng, stats, layout, empty)
        if buffer:
            yield _drain(buffer, rng, stats, layout, empty)
    finally:
        for cursor in cursors:
            cursor.close()


def _drain(
    buffer: list[pa.RecordBatch],
    rng: np.random.Generator | None,
    stats: BufferStats,
    layout: BlockLayout,
    empty: Allocator,
) -> dict[str, np.ndarray]:
    # Each batch's columns are zero-copy views of Arrow memory; build_block writes every
    # output array once, permuted in place (no concatenate-then-permute).
    parts = [batch_arrays(batch, layout) for batch in buffer]
    buffer.clear()
    stats.rows_held = 0
    total = sum(len(next(iter(p.values()))) for p in parts) if parts[0] else 0
    destination = None if rng is None else rng.permutation(total)
    return build_block(parts, destination, layout, empty)


def batch_arrays(batch: pa.RecordBatch, layout: BlockLayout) -> dict[str, np.ndarray]:
    """One read as arrays: unstacked columns (:func:`table_columns`), then each stack as a
    row-major ``(rows, k)`` array in its final dtype's kind (built by Arrow's
    ``RecordBatch.to_tensor`` when the columns are numbers without nulls, else by NumPy).

    Raises
    ------
    StoreError
        A stacked column is not a number or boolean column.
    """
    names = batch.schema.names
    plain = [n for n in names if n not in layout.stacked]
    out = table_columns(batch.select(plain)) if len(plain) != len(names) else table_columns(batch)
    for key, members in layout.stack:
        sub = batch.select(list(members))
        types = [f.type for f in sub.schema]
        numeric = all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in types)
        if numeric and not any(c.null_count for c in sub.columns):
            dtype = stacked_dtype([np.dtype(t.to_pandas_dtype()) for t in types], layout, members)
            rows = np.asarray(sub.to_tensor(row_major=True))
            out[key] = rows if rows.dtype.kind == dtype.kind else rows.astype(dtype)
        else:
            out[key] = stack_columns(table_columns(sub), members)
    return out


def table_columns(table: pa.Table | pa.RecordBatch) -> dict[str, np.ndarray]:
    """A table's (or record batch's) columns as NumPy arrays, rows first.

    ``fixed_size_binary[w]`` columns (such as Fashion-MNIST's ``image``) become uint8 arrays of
    shape ``(rows, w)``; numeric and boolean columns their NumPy dtype, shape ``(rows,)``; any
    other type an object array of Python values. Number columns without nulls and fixed-size
    binary columns are read-only zero-copy views of the Arrow buffers (taken directly, since
    ``pyarrow.Array.to_numpy`` imports pandas, which costs a DataLoader worker about 0.4 s).

    Raises
    ------
    StoreError
        A fixed-size binary column has nulls (there is no array value for a missing image).
    """
    out: dict[str, np.ndarray] = {}
    for name, column in zip(table.schema.names, table.columns, strict=True):
        if isinstance(column, pa.ChunkedArray):
            arr = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        else:
            arr = column
        if pa.types.is_fixed_size_binary(arr.type):
            if arr.null_count:
                raise StoreError(f"column {name!r} has {arr.null_count} null value(s)")
            width = arr.type.byte_width
            data = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
            start = arr.offset * width
            out[name] = data[start : start + len(arr) * width].reshape(len(arr), width)
        elif (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)) and not (
            arr.null_count
        ):
            data = np.frombuffer(arr.buffers()[1], dtype=arr.type.to_pandas_dtype())
            out[name] = data[arr.offset : arr.offset + len(arr)]
        elif pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
            out[name] = arr.to_numpy(zero_copy_only=False)  # nulls: NaN, as floats
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
    blocks: Iterator[dict[str, np.ndarray]], batch_size: int, empty: Allocator = empty_arrays
) -> Iterator[dict[str, np.ndarray]]:
    """Re-cut column blocks into batches of ``batch_size`` rows (the last may be shorter).

    Batches within a block are views; only a batch that spans two blocks is copied, into arrays
    from ``empty``.
    """
    carry: dict[str, np.ndarray] | None = None
    for block in blocks:
        n = len(next(iter(block.values()))) if block else 0
        offset = 0
        if carry is not None:
            have = len(next(iter(carry.values())))
            offset = min(batch_size - have, n)
            carry = _concat(carry, {k: v[:offset] for k, v in block.items()}, empty)
            if have + offset < batch_size:
                continue
            yield carry
            carry = None
        full = offset + (n - offset) // batch_size * batch_size
        for start in range(offset, full, batch_size):
            yield {k: v[start : start + batch_size] for k, v in block.items()}
        if full < n:
            carry = {k: v[full:].copy() for k, v in block.items()}
    if carry is not None:
        yield carry


def _concat(
    a: dict[str, np.ndarray], b: dict[str, np.ndarray], empty: Allocator
) -> dict[str, np.ndarray]:
    specs = [((len(v) + len(b[k]), *v.shape[1:]), v.dtype) for k, v in a.items()]
    out = dict(zip(a, empty(specs), strict=True))
    for k, v in out.items():
        v[: len(a[k])] = a[k]
        v[len(a[k]) :] = b[k]
    return out
