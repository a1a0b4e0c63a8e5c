"""Batches as torch tensors; in DataLoader workers, built directly in shared memory.

A worker that allocates its output arrays with :func:`shared_empty` and yields them with
:func:`as_tensor` saves one copy of every batch on its way to the main process.
Why: docs/design-notes.md, scalelab.store.streaming.shared_batches.
"""

from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Sequence

import numpy as np
import torch

#: ``madvise`` advice that maps pages writable up front (``<linux/mman.h>``).
_MADV_POPULATE_WRITE = 23
try:
    _madvise = ctypes.CDLL(None, use_errno=True).madvise if sys.platform == "linux" else None
except (OSError, AttributeError):
    _madvise = None
if _madvise is not None:
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _madvise.restype = ctypes.c_int
#: Byte alignment of each array in a shared segment.
_ALIGN = 64
#: NumPy dtypes with a torch equivalent (others stay NumPy arrays).
_TORCH_DTYPES = {
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
}


def shared_empty(specs: Sequence[tuple[tuple[int, ...], np.dtype]]) -> list[np.ndarray]:
    """Uninitialised NumPy arrays, one per ``(shape, dtype)``, all in one shared-memory segment.

    One segment per block (or batch) rather than one per array: a batch then crosses to the main
    process as one file descriptor. Each array starts on a 64-byte boundary and its ``base`` is
    the segment's tensor (:func:`as_tensor` finds it again). Dtypes torch has not (strings,
    objects, unsigned ints over 8 bits) and empty arrays get ordinary memory.
    """
    offsets: list[int | None] = []
    size = 0
    for shape, dtype in specs:
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if np.dtype(dtype) not in _TORCH_DTYPES or nbytes == 0:
            offsets.append(None)
            continue
        offsets.append(size)
        size += -(-nbytes // _ALIGN) * _ALIGN
    segment = _new_segment(size) if size else None
    out = []
    for (shape, dtype), offset in zip(specs, offsets, strict=True):
        if offset is None or segment is None:
            out.append(np.empty(shape, dtype))
            continue
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        out.append(segment[offset : offset + nbytes].view(dtype).reshape(shape))
    return out


def _new_segment(nbytes: int) -> np.ndarray:
    """A uint8 array over a new shared-memory tensor of ``nbytes``; its ``base`` is the tensor."""
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is None:  # not in this torch: allocate, then move (one more copy)
        return torch.empty(nbytes, dtype=torch.uint8).share_memory_().numpy()
    # A new segment, written once by the caller (share_memory_ would first copy an empty
    # tensor into it: three times slower here, where each page's first touch is the cost).
    storage = new_shared(nbytes)
    _populate(storage.data_ptr(), nbytes)
    tensor = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (nbytes,))
    return tensor.numpy()


def _populate(address: int, nbytes: int) -> None:
    """Map a new segment's pages in one call (Linux >= 5.14) instead of one fault a page.

    Measured here (a virtual machine, where a page fault costs about 2 us): a segment written
    once costs 1.4x less CPU. Without ``madvise`` or ``MADV_POPULATE_WRITE``, nothing happens:
    the pages fault in as they are written.
    """
    if _madvise is not None:
        _madvise(address, nbytes, _MADV_POPULATE_WRITE)  # an error (EINVAL) changes nothing


def as_tensor(array: np.ndarray) -> torch.Tensor | np.ndarray:
    """``array`` as a torch tensor that shares its memory.

    A view of an array from :func:`shared_empty` becomes a view of the same shared storage
    (never a copy). Other arrays go through ``torch.from_numpy`` (zero-copy; read-only arrays
    are copied first, since torch cannot mark a tensor read-only). Arrays of a dtype torch has
    not are returned unchanged.
    """
    torch_dtype = _TORCH_DTYPES.get(array.dtype)
    if torch_dtype is None:
        return array
    base = array.base
    while isinstance(base, np.ndarray):  # views of views: the segment's owner is a tensor
        base = base.base
    if isinstance(base, torch.Tensor):
        storage = base.untyped_storage()
        offset = array.__array_interface__["data"][0] - storage.data_ptr()
        item = array.itemsize
        if 0 <= offset <= storage.nbytes() and all(s % item == 0 for s in array.strides):
            return torch.empty(0, dtype=torch_dtype).set_(
                storage, offset // item, array.shape, tuple(s // item for s in array.strides)
            )
    return torch.from_numpy(array if array.flags.writeable else array.copy())
