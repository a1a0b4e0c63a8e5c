"""Read-ahead for a remote file that reads byte ranges: few large requests instead of many small.

hdfs-native's ``FileReader`` sends every ``read`` to the DataNode as it comes. pyarrow reads a
Parquet row group one column chunk at a time (Million Song shards: 91 chunks of about 90 KiB per
8 MiB row group), so a Parquet stream from ``hdfs://`` made thousands of small DataNode requests:
``bench/hdfs_stream.py`` streamed at 0.31-0.32 of the same stream from local shards. Through
:class:`ReadAheadFile` the same stream asks for 1 MiB at a time. Why 1 MiB (768 MiB of shards on
the test cluster, 2026-12-07, three runs each): a DataLoader stream with two workers took
3.06-3.39 s with 1 MiB blocks, 3.04-3.81 s with 2 MiB, 3.20-4.22 s with 4 MiB (5.6-6.8 s
unbuffered, 1.88-2.42 s from local shards), its peak PSS 887-902 MiB with 1 MiB blocks and
920-940 MiB with 4 MiB (866-889 MiB from local shards); the thread mode took 2.85-2.99 s with
1 MiB and 3.93-4.51 s with 4 MiB. Read alone, without decoding beside it, 4 MiB requests are the
fastest (600-746 MiB/s; 1 MiB 484-494; a whole 32 MiB shard by ``cat_file`` 277-289), but in a
stream the smaller blocks cost less memory and no time.
"""

from __future__ import annotations

import io
import os
from typing import Any, Protocol

#: Bytes fetched per request when a file is opened without a ``block_size`` (fsspec's remote file
#: systems' convention: s3fs's and gcsfs's ``default_block_size``). See the module.
DEFAULT_BLOCK_SIZE = 2**20


class RangeReader(Protocol):
    """What :class:`ReadAheadFile` reads through: the file's length and byte ranges."""

    def __len__(self) -> int: ...

    def read_range(self, offset: int, len: int) -> bytes: ...


class ReadAheadFile(io.RawIOBase):
    """A read-only, seekable binary file over ``reader`` that fetches ``block_size`` bytes at a
    time from the position read and serves the reads that follow from that block.

    A read of ``block_size`` bytes or more goes to ``reader`` as it is (no copy through the
    block); a read that starts in the block and ends past it takes the block's tail and fetches
    the next block. Memory: one block (``block_size`` bytes) per open file, and a block that
    a :meth:`read_buffer` view still refers to. ``read`` returns ``bytes``, as ``io``'s contract
    says.

    Raises
    ------
    ValueError
        ``block_size`` below 1; reading a closed file.
    """

    def __init__(self, reader: RangeReader, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        super().__init__()
        if block_size < 1:
            raise ValueError(f"block_size must be 1 byte or more, not {block_size!r}")
        self._reader = reader
        self.block_size = int(block_size)
        #: The file's length in bytes when it was opened.
        self.size = len(reader)
        self._pos = 0
        self._start = 0  # file offset of self._block
        self._block = b""
        self._view = memoryview(self._block)

    def __len__(self) -> int:
        return self.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._checkClosed()
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Move to ``offset`` bytes from the start, the position or the end (``whence``);
        returns the new position. Nothing is fetched until the next read."""
        self._checkClosed()
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self.size}.get(whence)
        if base is None:
            raise ValueError(f"whence must be 0, 1 or 2, not {whence!r}")
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the position (all to the end for None or a negative
        ``size``); ``b""`` at the end of the file."""
        out = self._read(size)
        return out if isinstance(out, bytes) else bytes(out)

    def read_buffer(self, size: int | None = -1) -> bytes | memoryview:
        """As :meth:`read`, but a read inside the block is a view of it, not a copy: pyarrow's
        Python file adapter calls this in place of ``read`` where a file has it (``io.cc``:
        ``HasReadBuffer``), so a Parquet column chunk goes from the DataNode's answer into
        the decoder without a copy in Python. The view keeps its block alive."""
        return self._read(size)

    def _read(self, size: int | None) -> bytes | memoryview:
        self._checkClosed()
        end = self.size if size is None or size < 0 else min(self.size, self._pos + size)
        parts: list[bytes | memoryview] = []
        while self._pos < end:
            inside = self._pos - self._start
            if 0 <= inside < len(self._block):
                piece: bytes | memoryview = self._view[inside : end - self._start]
            elif end - self._pos >= self.block_size:
                piece = self._reader.read_range(self._pos, end - self._pos)
            else:
                length = min(self.block_size, self.size - self._pos)
                self._start, self._block = self._pos, self._reader.read_range(self._pos, length)
                self._view = memoryview(self._block)
                if not self._block:
                    break  # the file is shorter than when it was opened
                continue
            if not len(piece):
                break
            parts.append(piece)
            self._pos += len(piece)
        if not parts:
            return b""
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        """Read into the writable ``buffer``; returns the bytes read."""
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._block = b""
        self._view = memoryview(self._block)
        super().close()
