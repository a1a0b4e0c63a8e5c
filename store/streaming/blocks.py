"""One shuffle buffer's reads -> one block of arrays: columns, stacked features, one permutation.

Pure NumPy, no I/O. A block is a dict name -> array over the buffer's rows; a
:class:`BlockLayout` says which columns are stacked into one ``(rows, k)`` array and the float
type; :func:`build_block` writes each output array once, into memory from an ``empty`` allocator.
Why: docs/design-notes.md, scalelab.store.streaming.blocks.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from scalelab.store.errors import StoreError

#: ``empty([(shape, dtype), ...]) -> [array, ...]``: allocates the arrays of one block or batch
#: together (:func:`empty_arrays`, or one shared-memory segment for all of them).
Allocator = Callable[[Sequence[tuple[tuple[int, ...], np.dtype]]], list[np.ndarray]]
#: Float types ``float_dtype`` may name.
FLOAT_DTYPES = ("float16", "float32", "float64")


def empty_arrays(specs: Sequence[tuple[tuple[int, ...], np.dtype]]) -> list[np.ndarray]:
    """``np.empty`` for each ``(shape, dtype)`` of ``specs``: the default :data:`Allocator`."""
    return [np.empty(shape, dtype) for shape, dtype in specs]


def _nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


class BlockPool:
    """An :data:`Allocator` that reuses the memory of blocks nobody holds any more.

    Each call takes one buffer for all the arrays it allocates (each aligned to 64 bytes): a
    buffer of the pool that no array views any more (in NumPy every view of a buffer, and every
    ``torch.from_numpy`` tensor of such a view, holds a reference to it, so its reference count
    says when the last batch of a block was dropped), else a new one, at least as large as the
    largest asked for so far. At most ``keep`` buffers are kept; beyond them (a consumer holding
    on to many batches) new memory is allocated and freed as usual. Reusing the same few buffers
    keeps a stream's memory flat: the allocator neither faults in fresh pages for every block
    nor keeps freed blocks' memory as fragments. Arrays of Python objects (strings) get
    ordinary memory. Thread-safe.
    """

    ALIGN = 64

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._buffers: list[np.ndarray] = []
        self._largest = 0
        self._lock = threading.Lock()
        probe = [np.empty(0, np.uint8)]
        self._idle = self._refs(probe, 0)

    @staticmethod
    def _refs(buffers: list[np.ndarray], index: int) -> int:
        return sys.getrefcount(buffers[index])

    def __call__(self, specs: Sequence[tuple[tuple[int, ...], np.dtype]]) -> list[np.ndarray]:
        offsets: list[int | None] = []
        need = 0
        for shape, dtype in specs:
            if np.dtype(dtype).hasobject:  # Python objects (strings): never raw memory
                offsets.append(None)
                continue
            offsets.append(need)
            need += -(-_nbytes(shape, dtype) // self.ALIGN) * self.ALIGN
        with self._lock:
            buffer = self._take(need)
            return [
                np.empty(shape, dtype)
                if o is None
                else buffer[o : o + _nbytes(shape, dtype)].view(dtype).reshape(shape)
                for o, (shape, dtype) in zip(offsets, specs, strict=True)
            ]

    def _take(self, need: int) -> np.ndarray:
        self._largest = max(self._largest, need)
        small = None
        for i in range(len(self._buffers)):
            if self._refs(self._buffers, i) <= self._idle:
                if self._buffers[i].nbytes >= need:
                    return self._buffers[i]
                small = i
        buffer = np.empty(max(self._largest, 1), np.uint8)
        if len(self._buffers) < self.keep:
            self._buffers.append(buffer)
        elif small is not None:
            self._buffers[small] = buffer
        return buffer


@dataclass(frozen=True)
class BlockLayout:
    """How a block's columns come out.

    Attributes
    ----------
    stack
        ``(key, (column, ...))`` pairs: those columns, in that order, become one C-contiguous
        array of shape ``(rows, len(columns))`` under ``key``, instead of one array each. Their
        dtype is NumPy's common type of the columns (``float64`` for the Million Song
        features), then ``float_dtype`` if that is floating.
    float_dtype
        None keeps each floating-point column's own type; else every floating-point column and
        stack comes out as this type (e.g. ``float32``: half the bytes of ``float64``).
    """

    stack: tuple[tuple[str, tuple[str, ...]], ...] = ()
    float_dtype: np.dtype | None = None
    _stacked: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_stacked", frozenset(n for _, names in self.stack for n in names))

    @classmethod
    def build(
        cls, stack: Mapping[str, Sequence[str]] | None = None, float_dtype: str | None = None
    ) -> BlockLayout:
        """Check user input and build a layout.

        Raises
        ------
        ValueError
            ``stack`` is not a mapping of key -> non-empty list of column names, a column is in
            two stacks or twice in one, or ``float_dtype`` is not one of :data:`FLOAT_DTYPES`.
        """
        if float_dtype is not None and str(float_dtype) not in FLOAT_DTYPES:
            raise ValueError(
                f"float_dtype must be None or one of {', '.join(FLOAT_DTYPES)}, not {float_dtype!r}"
            )
        pairs: list[tuple[str, tuple[str, ...]]] = []
        if stack is not None:
            if not isinstance(stack, Mapping):
                raise ValueError(
                    "stack must be a dict key -> list of column names, e.g. "
                    f"{{'features': ['f01', 'f02']}}, not {type(stack).__name__}"
                )
            seen: set[str] = set()
            for key, names in stack.items():
                if isinstance(names, str) or not isinstance(names, Sequence) or not names:
                    raise ValueError(
                        f"stack[{key!r}] must be a non-empty list of column names, not {names!r}"
                    )
                twice = sorted({n for n in names if n in seen or list(names).count(n) > 1})
                if twice:
                    raise ValueError(f"column(s) {twice} stacked twice: give each column once")
                seen.update(names)
                pairs.append((str(key), tuple(str(n) for n in names)))
        return cls(tuple(pairs), None if float_dtype is None else np.dtype(float_dtype))

    @property
    def stacked(self) -> frozenset[str]:
        """The names of all stacked columns."""
        return self._stacked

    def read_columns(self, columns: Sequence[str] | None) -> list[str] | None:
        """Columns to read: ``columns`` plus any stacked column it leaves out (None: all)."""
        if columns is None:
            return None
        extra = [n for _, names in self.stack for n in names if n not in columns]
        return [*columns, *extra]

    def check_names(self, names: Sequence[str], where: str) -> None:
        """Refuse a layout whose keys clash with column names, or whose columns are missing.

        Raises
        ------
        StoreError
            A stacked column is not in ``names`` (the columns of shard ``where``), or a stack's
            key is also the name of a column that is not stacked.
        """
        missing = sorted(self.stacked.difference(names))
        if missing:
            raise StoreError(f"{where}: no column(s) {missing} to stack; it has {list(names)}")
        for key, _ in self.stack:
            if key in names and key not in self.stacked:
                raise StoreError(
                    f"{where}: stack key {key!r} is also a column's name; choose another key"
                )

    def out_dtype(self, dtype: np.dtype) -> np.dtype:
        """The dtype a column or stack of ``dtype`` comes out as."""
        if self.float_dtype is not None and dtype.kind == "f":
            return self.float_dtype
        return dtype


def stacked_dtype(
    dtypes: Sequence[np.dtype], layout: BlockLayout, names: Sequence[str]
) -> np.dtype:
    """The dtype of a stack of columns of ``dtypes``: their common type, then ``float_dtype``.

    Raises
    ------
    StoreError
        A column is not a number or boolean column (``names`` are named in the message).
    """
    for name, dtype in zip(names, dtypes, strict=True):
        if dtype.kind not in "biuf":
            raise StoreError(
                f"column {name!r} ({dtype}) cannot be stacked: stack only number or boolean columns"
            )
    return layout.out_dtype(np.result_type(*dtypes))


def check_stackable(columns: Mapping[str, np.ndarray], names: Sequence[str]) -> None:
    """Refuse to stack columns ``names`` of ``columns`` that are not 1-D numbers or booleans.

    Raises
    ------
    StoreError
        A column is not 1-D (e.g. a fixed-size binary image) or not a number.
    """
    for n in names:
        if columns[n].ndim != 1:
            raise StoreError(
                f"column {n!r} (shape {columns[n].shape[1:]} a row) cannot be stacked: "
                "stack only number or boolean columns"
            )
    stacked_dtype([columns[n].dtype for n in names], BlockLayout(), names)


def stack_columns(columns: Mapping[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    """Columns ``names`` (1-D, equal length) as one C-contiguous ``(rows, len(names))`` array.

    Raises
    ------
    StoreError
        A column is not 1-D (e.g. a fixed-size binary image) or not a number.
    """
    check_stackable(columns, names)
    return np.stack([columns[n] for n in names], axis=1)


def empty_column_block(
    columns: Mapping[str, np.ndarray], rows: int, layout: BlockLayout, empty: Allocator
) -> dict[str, np.ndarray]:
    """A block of ``rows`` rows, not yet written, for reads of columns like ``columns``.

    ``columns`` is one read's columns, each under its own name
    (:func:`~scalelab.store.streaming.parquet_stream.table_columns`). The block has, as
    :func:`build_block`'s, the unstacked columns under their names, then each stack of
    ``layout`` as one ``(rows, k)`` array under its key, all allocated in one call of ``empty``.

    Raises
    ------
    StoreError
        A stacked column is not a 1-D number or boolean column.
    """
    specs = [
        ((rows, *a.shape[1:]), layout.out_dtype(a.dtype))
        for name, a in columns.items()
        if name not in layout.stacked
    ]
    names = [name for name in columns if name not in layout.stacked]
    for key, members in layout.stack:
        check_stackable(columns, members)
        dtype = stacked_dtype([columns[n].dtype for n in members], layout, members)
        specs.append(((rows, len(members)), dtype))
        names.append(key)
    return dict(zip(names, empty(specs), strict=True))


#: Bytes of the row-major scratch through which :func:`write_columns` scatters a stack's rows
#: into a permuted block. A Million Song row group (11,522 rows, 90 float64 columns) into a
#: block of twice its rows: 5.4-6.4 ms a column at a time, 3.6-3.7 ms through this 1 MiB
#: scratch (1,456 rows), 2.7-3.1 ms through 1.4-2.9 MiB, 3.7-4.0 ms through 0.35 MiB
#: (2026-12-07, this machine).
SCATTER_BYTES = 2**20


def write_columns(
    block: Mapping[str, np.ndarray],
    columns: Mapping[str, np.ndarray],
    layout: BlockLayout,
    start: int,
    destination: np.ndarray | None,
) -> int:
    """Write one read's ``columns`` as rows ``start ..`` of the concatenated reads into ``block``
    (from :func:`empty_column_block`): each unstacked column to its array, each stacked column
    into its column of its stack: straight there in read order, through a row-major scratch of
    at most :data:`SCATTER_BYTES` when the rows are permuted (no row-major copy of the whole
    read in between).

    ``destination`` as :func:`build_block`'s. Returns ``start`` plus the read's rows.
    """
    n = len(next(iter(columns.values())))
    rows = slice(start, start + n) if destination is None else destination[start : start + n]
    for name, values in columns.items():
        if name not in layout.stacked:
            block[name][rows] = values
    for key, members in layout.stack:
        target = block[key]
        if destination is None:
            for j, name in enumerate(members):
                target[rows, j] = columns[name]
            continue
        # Permuted: a column at a time would scatter each value to a random row (one cache
        # miss per value); through a small row-major scratch, whole rows are scattered.
        step = max(1, SCATTER_BYTES // (len(members) * target.itemsize))
        scratch = np.empty((min(step, n), len(members)), target.dtype)
        for first in range(0, n, step):
            m = min(step, n - first)
            for j, name in enumerate(members):
                scratch[:m, j] = columns[name][first : first + m]
            target[rows[first : first + m]] = scratch[:m]
    return start + n


def build_block(
    parts: Sequence[Mapping[str, np.ndarray]],
    destination: np.ndarray | None,
    layout: BlockLayout,
    empty: Allocator = empty_arrays,
) -> dict[str, np.ndarray]:
    """Concatenate the reads ``parts`` (dicts name -> array, rows first) into one block.

    Parameters
    ----------
    parts
        The buffer's reads, in read order, all with the same names: unstacked columns under
        their names (``(rows,)`` or ``(rows, w)``), each stack as its row-major ``(rows, k)``
        array under its key (:func:`stack_columns`, or Arrow's ``RecordBatch.to_tensor``).
    destination
        None keeps the read order; else a permutation of ``range(total rows)``: row ``i`` of the
        concatenated reads goes to row ``destination[i]`` of every output array (one vectorised
        scatter of whole rows per read and array).
    layout
        The float type (``float_dtype``) the output arrays are cast to while they are written.
    empty
        Allocates the output arrays, all in one call (each is written exactly once).

    Returns
    -------
    dict
        The same names and shapes per row as ``parts``, ``total rows`` long. Every array is
        writable and owns fresh memory from ``empty``.
    """
    first = parts[0]
    total = sum(len(next(iter(p.values()))) for p in parts) if first else 0
    specs = [((total, *a.shape[1:]), layout.out_dtype(a.dtype)) for a in first.values()]
    out = dict(zip(first, empty(specs), strict=True))
    for name, values in out.items():
        start = 0
        for part in parts:
            chunk = part[name]
            if destination is None:
                values[start : start + len(chunk)] = chunk
            else:
                values[destination[start : start + len(chunk)]] = chunk
            start += len(chunk)
    return out
