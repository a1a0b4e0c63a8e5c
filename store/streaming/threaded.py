"""Parquet shards decoded by a pool of threads: row groups in a random order, shuffled in blocks.

The thread mode of :class:`~scalelab.store.streaming.TorchParquetDataset`: row groups are cut
into tasks of at least ``buffer_rows`` rows, each decoded by one thread into one block of a
:class:`~.blocks.BlockPool` and yielded in task order, so the order depends only on the seed,
epoch and reader. Why: docs/design-notes.md, scalelab.store.streaming.threaded.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

try:  # ParquetFile's reader: unlike ParquetFile, it takes a memory pool
    from pyarrow._parquet import ParquetReader as _ParquetReader
except ImportError:  # pragma: no cover - a pyarrow without it reads through ParquetFile
    _ParquetReader = None

from scalelab.store.errors import StoreError
from scalelab.store.streaming.blocks import (
    Allocator,
    BlockLayout,
    BlockPool,
    empty_arrays,
    empty_column_block,
    write_columns,
)
from scalelab.store.streaming.parquet_stream import BufferStats, check_columns, table_columns

#: Most decoding threads ``threads=None`` starts (more rarely pays: the training loop needs a core).
MAX_AUTO_THREADS = 4


def default_threads() -> int:
    """Decoding threads for ``threads=None`` outside DataLoader workers: the CPUs this process
    may run on (``os.sched_getaffinity``, else ``os.cpu_count``), at most
    :data:`MAX_AUTO_THREADS`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_AUTO_THREADS, cpus))


@dataclass(frozen=True)
class Task:
    """Row groups decoded together into one block: ``units`` are ``(shard index, row group)``."""

    units: tuple[tuple[int, int], ...]
    rows: int


def plan_tasks(
    row_groups: Sequence[Sequence[int]], rng: np.random.Generator | None, buffer_rows: int
) -> list[Task]:
    """Cut the row groups of the shards into tasks.

    Parameters
    ----------
    row_groups
        For each shard (in the reader's shard order), the row count of each of its row groups.
    rng
        None keeps shard and row-group order; else the row groups are permuted by it.
    buffer_rows
        A task takes consecutive row groups until it holds at least this many rows.

    Returns
    -------
    list of Task
        Every row group with rows exactly once; empty row groups are left out.
    """
    units = [(s, g, n) for s, groups in enumerate(row_groups) for g, n in enumerate(groups) if n]
    if rng is not None:
        units = [units[i] for i in rng.permutation(len(units))]
    tasks: list[Task] = []
    current: list[tuple[int, int]] = []
    rows = 0
    for shard, group, n in units:
        current.append((shard, group))
        rows += n
        if rows >= buffer_rows:
            tasks.append(Task(tuple(current), rows))
            current, rows = [], 0
    if current:
        tasks.append(Task(tuple(current), rows))
    return tasks


def _footer(
    fs: fsspec.AbstractFileSystem,
    shard: str,
    columns: Sequence[str] | None,
    layout: BlockLayout,
) -> pq.FileMetaData:
    with fs.open(shard, "rb") as f:
        metadata = pq.ParquetFile(f, pre_buffer=False).metadata
    check_columns(metadata.schema.to_arrow_schema().names, columns, layout, shard)
    return metadata


#: Arrow's allocator for what the threads decode: the system's (``malloc``). pyarrow's default,
#: mimalloc, keeps the pages each decoding thread frees for a while: about 40 MiB more PSS in
#: ``bench/stream_peers.py`` (Million Song, 2 threads), and no faster.
DECODE_POOL = pa.system_memory_pool()


def leaf_indices(footer: pq.FileMetaData, columns: Sequence[str] | None) -> list[int] | None:
    """The Parquet leaf columns of the top-level ``columns`` (a struct or list column has
    several), in the order of ``columns``; None for all."""
    if columns is None:
        return None
    paths = [footer.schema.column(i).path for i in range(footer.num_columns)]
    return [
        i for name in columns for i, p in enumerate(paths) if p == name or p.startswith(name + ".")
    ]


@contextlib.contextmanager
def native_file(f: Any) -> Iterator[pa.NativeFile | None]:
    """An Arrow file reading the same file as the open file object ``f`` without Python, or None.

    Where ``f`` is a file of this machine's disks (it has a ``fileno``) and Linux shows it in
    ``/proc/self/fd``, the same open file is opened again natively: Arrow then reads the row
    group's bytes with the GIL released. Through ``f`` itself, Arrow calls ``f.read`` once per
    column chunk, each time taking the GIL from the training loop (on the Million Song bench a
    third of the decoding threads' time went to these reads, half of it waiting for the GIL,
    and each read made a Python copy of the bytes). The file is the one the store's
    ``open`` checked (the descriptor, not the path, is reopened). Remote stores' files (S3,
    HDFS) have no ``fileno``: None, and Arrow reads through ``f``.
    """
    try:
        fd = f.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        fd = None
    path = None if fd is None else os.path.join(os.sep, "proc", "self", "fd", str(fd))
    if path is None or not os.path.exists(path):
        yield None
        return
    with pa.OSFile(path, "rb", memory_pool=DECODE_POOL) as native:
        yield native


def read_row_group(
    source: Any, footer: pq.FileMetaData, group: int, columns: Sequence[str] | None
) -> pa.Table:
    """Row group ``group`` of the open Parquet file ``source`` (footer ``footer``), columns
    ``columns`` (None: all), decoded in this thread into :data:`DECODE_POOL`'s memory.

    pyarrow's ``ParquetFile`` takes no memory pool; its reader class does (used where this
    pyarrow has it as pyarrow 26 does, else ``ParquetFile`` on pyarrow's default pool).
    """
    # use_threads=False: the caller's pool is the parallelism; Arrow's own threads would only
    # compete with it (and cost more CPU per byte). pre_buffer=False: no second copy of the
    # row group's raw bytes.
    if _ParquetReader is not None:
        reader = _ParquetReader(DECODE_POOL)
        try:
            reader.open(source, metadata=footer, pre_buffer=False)
        except TypeError:
            pass  # another pyarrow's private reader: the public one below
        else:
            indices = leaf_indices(footer, columns)
            return reader.read_row_group(group, column_indices=indices, use_threads=False)
    parquet = pq.ParquetFile(source, metadata=footer, pre_buffer=False)
    return parquet.read_row_group(group, columns=columns, use_threads=False)


def _decode(
    fs: fsspec.AbstractFileSystem,
    shards: Sequence[str],
    footers: Sequence[pq.FileMetaData],
    task: Task,
    columns: list[str] | None,
    destination: np.ndarray | None,
    layout: BlockLayout,
    empty: Allocator,
) -> dict[str, np.ndarray]:
    # The block is allocated once, at the first rows, and each row group is written into it
    # (permuted, stacked columns straight into their place) as soon as it is decoded, then
    # dropped: a thread holds its block and one decoded row group, nothing more.
    block: dict[str, np.ndarray] | None = None
    start = 0
    for shard, group in task.units:
        with fs.open(shards[shard], "rb") as f, native_file(f) as native:
            source = f if native is None else native
            table = read_row_group(source, footers[shard], group, columns)
        for batch in table.to_batches():
            if batch.num_rows:
                arrays = table_columns(batch)  # zero-copy views of the decoded row group
                if block is None:
                    block = empty_column_block(arrays, task.rows, layout, empty)
                start = write_columns(block, arrays, layout, start, destination)
                del arrays
            del batch
        del table  # freed before the next row group is decoded
    if block is None or start != task.rows:
        raise StoreError(
            f"{[shards[s] for s, _ in task.units]}: {start} rows decoded where the footers "
            f"promised {task.rows}; a shard changed while it was read: start the epoch again"
        )
    return block


def iter_threaded(
    fs: fsspec.AbstractFileSystem,
    shards: Sequence[str],
    *,
    columns: Sequence[str] | None,
    rng: np.random.Generator | None,
    threads: int,
    buffer_rows: int,
    stats: BufferStats | None = None,
    layout: BlockLayout | None = None,
    empty: Allocator = empty_arrays,
) -> Iterator[dict[str, np.ndarray]]:
    """Stream ``shards`` as column blocks, decoded by ``threads`` threads (see the module).

    Parameters
    ----------
    columns
        Columns to read; None reads all. Stacked columns (``layout``) are read in any case.
    rng
        None: shards in order, row groups in order, rows in order. Otherwise it permutes the
        row groups and each block's rows (draws happen in this thread, in task order).
    threads
        Decoding threads (>= 1).
    buffer_rows
        Rows a block holds at least (several row groups mixed), unless the shards run out.

    Yields
    ------
    dict
        Column name -> NumPy array, first axis the block's rows (as
        :func:`~scalelab.store.streaming.parquet_stream.iter_shuffled`'s blocks).

    Raises
    ------
    StoreError
        A column in ``columns`` or the layout that a shard lacks (from its footer, before any
        data is decoded), or a stacked column that is not a number.
    """
    stats = stats if stats is not None else BufferStats()
    layout = layout if layout is not None else BlockLayout()
    read = layout.read_columns(columns)
    if empty is empty_arrays:
        # the blocks in flight, the one being consumed and the one its last batch came from
        empty = BlockPool(keep=threads + 3)
    pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="scalelab-parquet")
    pending: deque[tuple[concurrent.futures.Future, int]] = deque()
    try:
        footers = list(pool.map(lambda s: _footer(fs, s, columns, layout), shards))
        groups = [[md.row_group(g).num_rows for g in range(md.num_row_groups)] for md in footers]
        tasks = iter(plan_tasks(groups, rng, buffer_rows))

        def submit() -> bool:
            task = next(tasks, None)
            if task is None:
                return False
            destination = None if rng is None else rng.permutation(task.rows)
            future = pool.submit(
                _decode, fs, shards, footers, task, read, destination, layout, empty
            )
            pending.append((future, task.rows))
            stats.add(task.rows)
            return True

        while len(pending) < threads + 1 and submit():
            pass
        while pending:
            future, rows = pending.popleft()
            block = future.result()
            stats.rows_held -= rows
            submit()
            yield block
            del block
    finally:
        for future, _ in pending:
            future.cancel()
        stats.rows_held = 0
        pool.shutdown(wait=True, cancel_futures=True)
