"""Streaming datasets from the course store, for PyTorch and tf.data.

:class:`TorchParquetDataset` (a ``torch.utils.data.IterableDataset`` over Parquet shards),
:func:`tf_dataset`, :func:`write_tfrecord_shards` and :func:`local_copy`, all through fsspec
(a local store, HDFS or S3), in memory bounded by a few row groups and a shuffle buffer.
TensorFlow is imported only by the functions that need it.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import fsspec
import torch.distributed
import torch.utils.data

from scalelab.store.access.cache import local_copy
from scalelab.store.access.student import open_store
from scalelab.store.streaming.blocks import BlockLayout, empty_arrays
from scalelab.store.streaming.parquet_stream import (
    DEFAULT_BUFFER_ROWS,
    DEFAULT_READ_ROWS,
    BufferStats,
    iter_batches,
    iter_rows,
    iter_shuffled,
    list_shards,
)
from scalelab.store.streaming.shard_plan import (
    Consumer,
    assign_shards,
    distributed_from_env,
    epoch_rng,
    shard_order,
)
from scalelab.store.streaming.shared_batches import as_tensor, shared_empty
from scalelab.store.streaming.tfdata import tf_dataset, write_tfrecord_shards
from scalelab.store.streaming.threaded import default_threads, iter_threaded

__all__ = ["TorchParquetDataset", "local_copy", "tf_dataset", "write_tfrecord_shards"]


class TorchParquetDataset(torch.utils.data.IterableDataset):
    """A PyTorch ``IterableDataset`` streaming the Parquet shards under ``path`` in the store.

    Parameters
    ----------
    path
        A folder of ``*.parquet`` shards, a glob, or one file, relative to the store root, e.g.
        ``"datasets/fashion-mnist/parquet/train"``.
    store
        An fsspec file system rooted at the course store; None opens
        :func:`scalelab.store.open_store` (from ``SCALELAB_STORE_URL``) in each process.
    columns
        Columns to read; None reads all.
    shuffle
        Permute the shard order each epoch and the rows within the shuffle buffer.
    seed
        Base seed; with the epoch it decides the shard order, which all ranks and workers share.
    transform
        Called on every sample; its result is what the dataset yields.
    shards_in_memory
        Shards read at once (interleaved into the shuffle buffer); each holds at most one decoded
        row group.
    batch_size
        None yields one row at a time: a dict column -> value, a uint8 array of shape ``(w,)``
        for ``fixed_size_binary[w]`` columns (Fashion-MNIST's ``image``: 784 bytes), a NumPy
        scalar otherwise. An integer yields dicts column -> torch tensor of up to
        ``batch_size`` rows (use ``DataLoader(dataset, batch_size=None)``): much faster for wide
        tables. Shapes: ``(rows,)`` for a number column, ``(rows, w)`` for
        ``fixed_size_binary[w]`` (uint8), ``(rows, k)`` for a stack; string and other columns
        without a torch type stay NumPy arrays. Outside DataLoader workers the tensors share
        NumPy's memory (``torch.from_numpy``); in a worker they are built directly in shared
        memory, so they reach the main process without another copy (the batches of one
        shuffle buffer share one segment, freed when the last of them is dropped). ``transform``
        receives these dicts.
    stack
        Columns to deliver as one array: ``{"features": ["f01", ..., "f90"]}`` yields, under
        ``"features"``, a C-contiguous ``(rows, 90)`` array of those number columns in that order
        (their common dtype, then ``float_dtype``), instead of 90 arrays; the other columns keep
        their names. The array is built once, straight from the decoded columns (no stacking in
        ``transform``), and crosses from a worker in one piece. Stacked columns are read even if
        ``columns`` leaves them out.
    float_dtype
        None (default) keeps each floating-point column's type as stored (Parquet ``double`` ->
        float64); ``"float32"`` (or ``"float16"``, ``"float64"``) converts every floating-point
        column and stack while it is copied anyway. Integer and boolean columns keep their type.
    buffer_rows, read_rows
        Rows of the shuffle buffer, and rows read from a shard at a time (None: reads of about
        4 MiB, sized from the shard's footer). Rows held at once stay under
        ``buffer_rows + read_rows``, plus one decoded row group per open shard in pyarrow. In the
        thread mode a block holds at least ``buffer_rows`` rows (whole row groups; ``read_rows``
        and ``shards_in_memory`` are not used) and at most ``threads + 1`` blocks are in flight.
    threads
        Decoding threads of the *thread mode* (see Notes). None (default): the thread mode with
        :func:`default_threads` threads (the CPUs, at most 4) when iterated outside DataLoader
        workers (``num_workers=0``), the one-thread shuffle buffer inside a worker. ``0``: always
        the shuffle buffer, one thread. ``n >= 1``: the thread mode with ``n`` threads, also in
        workers.
    rank, world_size
        The distributed rank of this process; None takes them from ``torch.distributed`` when its
        process group is initialised (create the dataset after ``init_process_group``), else
        from ``RANK``/``WORLD_SIZE``, else ``(0, 1)``.

    Raises
    ------
    StoreError
        No shards at ``path`` (raised here, at construction, not in a worker). When iterating:
        a column in ``columns`` or ``stack`` that the shards lack, a stack key that is also an
        unstacked column's name, or a stacked column that is not a number.
    ValueError
        A bad rank/world size, or fewer shards than ranks (when iterating); a bad ``stack`` or
        ``float_dtype``.

    Notes
    -----
    **Thread mode or worker processes.** By default, with ``DataLoader(ds, batch_size=None)``
    and no workers, a pool of threads in the training process decodes whole row groups
    (pyarrow, GIL released): each epoch the reader's row groups are read in a new random order,
    consecutive ones are gathered into blocks of at least ``buffer_rows`` rows, each block's
    rows are permuted, and blocks are re-cut into batches (:mod:`~.threaded`). It saves what
    worker processes cost: every batch copied into shared memory and sent to the main process,
    their start-up, a second interpreter's memory. Choose it (the default) for plain columns,
    stacks and ``float_dtype``, and for a ``transform`` that is cheap or runs in C with the GIL
    released (torch ops on whole batches). Choose worker processes (``num_workers=2`` or more;
    each worker then reads with one thread) when ``transform`` is per-sample Python work (PIL
    augmentation, tokenising, ``batch_size=None`` rows through Python): it runs in the threads'
    consumer, the training process, under the GIL, and processes run it in parallel.
    ``bench/stream_peers.py`` measures both against the usual alternatives.

    Each epoch every shard goes to exactly one DataLoader worker of exactly one rank. The epoch
    advances by itself at each new iteration in the process that iterates (the main process
    without workers; persistent workers); with non-persistent workers the DataLoader's per-epoch
    seed varies the order instead. In distributed training call :meth:`set_epoch` before each
    epoch, as with ``DistributedSampler``, so that all ranks agree on the shard order.

    Each process opens its own file system: a store handle passed in, or used by the parent
    before the DataLoader forks its workers, is rebuilt (unpickled) in each worker, so a handle's
    event loop, connection or open file is never shared across a fork.
    """

    def __init__(
        self,
        path: str,
        *,
        store: fsspec.AbstractFileSystem | None = None,
        columns: Sequence[str] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        transform: Callable[[Any], Any] | None = None,
        shards_in_memory: int = 2,
        batch_size: int | None = None,
        buffer_rows: int = DEFAULT_BUFFER_ROWS,
        read_rows: int | None = DEFAULT_READ_ROWS,
        rank: int | None = None,
        world_size: int | None = None,
        stack: dict[str, Sequence[str]] | None = None,
        float_dtype: str | None = None,
        threads: int | None = None,
    ) -> None:
        super().__init__()
        for name, value in (
            ("shards_in_memory", shards_in_memory),
            ("buffer_rows", buffer_rows),
            ("read_rows", 1 if read_rows is None else read_rows),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be None or a positive integer, not {batch_size!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 0):
            raise ValueError(
                f"threads must be None (automatic) or an integer >= 0, not {threads!r}"
            )
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        self.path = path
        self.columns = list(columns) if columns is not None else None
        self.shuffle = shuffle
        self.seed = seed
        self.transform = transform
        self.shards_in_memory = shards_in_memory
        self.batch_size = batch_size
        self.buffer_rows = buffer_rows
        self.read_rows = read_rows
        self.threads = threads
        self.layout = BlockLayout.build(stack, float_dtype)
        self._explicit_rank = None if rank is None else (rank, world_size)
        self._rank = self._distributed()
        self._store = store
        self._store_pid = os.getpid()
        self._epoch = 0
        self._iterations = 0
        #: Rows held by this process's reader (``peak_rows_held`` shows the memory bound at work).
        self.stats = BufferStats()
        self.shards = list_shards(self._fs(), path, ".parquet")

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s shard and row order for the next iteration (and count on from it)."""
        self._epoch = int(epoch)
        self._iterations = 0
        self._rank = self._distributed()

    def _distributed(self) -> tuple[int, int]:
        if self._explicit_rank is not None:
            return self._explicit_rank
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return distributed_from_env()

    def consumer(self) -> Consumer:
        """This process's place: distributed rank and DataLoader worker.

        The rank is read in the process that builds the dataset (or calls :meth:`set_epoch`):
        DataLoader workers do not see torch.distributed's process group.
        """
        rank, world_size = self._rank
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        return Consumer(rank=rank, world_size=world_size, worker=worker, num_workers=num_workers)

    def __iter__(self) -> Iterator[Any]:
        if torch.utils.data.get_worker_info() is None:
            self._rank = self._distributed()
        consumer = self.consumer()
        epoch = self._epoch + self._iterations
        self._iterations += 1
        # Alone (one rank), the DataLoader's per-iteration base seed, shared by its workers,
        # varies the order even when non-persistent workers are forked from an unchanged parent.
        info = torch.utils.data.get_worker_info()
        loader = (
            0 if info is None or consumer.world_size > 1 else (info.seed - info.id) & (2**32 - 1)
        )
        order = shard_order(self.shards, seed=self.seed ^ loader, epoch=epoch, shuffle=self.shuffle)
        mine = assign_shards(order, consumer)
        # Batches leave a worker through shared memory: build them there in the first place.
        empty = shared_empty if info is not None and self.batch_size is not None else empty_arrays
        rng = None
        if self.shuffle:
            rng = epoch_rng(self.seed ^ loader, epoch, consumer.rank, consumer.worker)
        threads = self.threads
        if threads is None:
            threads = 0 if info is not None else default_threads()
        if threads:
            blocks = iter_threaded(
                self._fs(),
                mine,
                columns=self.columns,
                rng=rng,
                threads=threads,
                buffer_rows=self.buffer_rows,
                stats=self.stats,
                layout=self.layout,
                empty=empty,
            )
        else:
            blocks = iter_shuffled(
                self._fs(),
                mine,
                columns=self.columns,
                rng=rng,
                buffer_rows=self.buffer_rows,
                read_rows=self.read_rows,
                shards_in_memory=self.shards_in_memory,
                stats=self.stats,
                layout=self.layout,
                empty=empty,
            )
        if self.batch_size is None:
            samples = iter_rows(blocks)
        else:
            samples = (
                {k: as_tensor(v) for k, v in batch.items()}
                for batch in iter_batches(blocks, self.batch_size, empty)
            )
        if self.transform is None:
            yield from samples
        else:
            for sample in samples:
                yield self.transform(sample)

    def _fs(self) -> fsspec.AbstractFileSystem:
        if self._store is None:
            self._store = open_store()
            self._store_pid = os.getpid()
        elif self._store_pid != os.getpid():
            # A handle from before the fork: rebuild it here (fsspec clears its instance cache
            # in a forked child, so this is a fresh instance with its own loop/connections).
            self._store = pickle.loads(pickle.dumps(self._store))
            self._store_pid = os.getpid()
        return self._store

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store_pid"] = None  # unpickled elsewhere (spawn workers): rebuild on first use
        return state
