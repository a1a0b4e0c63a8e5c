"""hdfs-native across ``fork()``: the ``hdfs://`` store's file system, safe in forked children.

:class:`ForkSafeHdfsFileSystem` makes a new hdfs-native client in each process that uses it
(inherited ones are kept, unused), and a forked child waits before its first read until the
parent's cached DataNode connections expire (:data:`DATANODE_CACHE_EXPIRY_S`).
Why: docs/design-notes.md, scalelab.store.access.hdfs_fork.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from hdfs_native import FileReader
from hdfs_native.fsspec import HdfsFileSystem

from scalelab.store.access.hdfs_fixes import HdfsNativeFixes
from scalelab.store.access.readahead import DEFAULT_BLOCK_SIZE, ReadAheadFile

#: Seconds a DataNode connection stays in hdfs-native's cache after a read (its 3 s), plus a
#: margin for the clocks (hdfs-native's wall clock, our monotonic one).
DATANODE_CACHE_EXPIRY_S = 3.25


class _ReadClock:
    """When this process last finished a DataNode read, and how many reads are running."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_read = 0.0  # time.monotonic(); 0: none
        self.in_flight = 0
        #: In a forked child: the monotonic time until which the parent's cached DataNode
        #: connections may still be taken (0: none to wait for).
        self.inherited_until = 0.0

    def begin(self) -> None:
        with self.lock:
            self.in_flight += 1

    def end(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.last_read = time.monotonic()

    def forked(self) -> None:
        """In the child, just after ``fork()`` (no other thread runs here yet)."""
        now = time.monotonic()
        if self.in_flight:
            self.inherited_until = now + DATANODE_CACHE_EXPIRY_S
        elif self.last_read:
            self.inherited_until = self.last_read + DATANODE_CACHE_EXPIRY_S
        self.lock = threading.Lock()
        self.in_flight = 0
        self.last_read = 0.0

    def wait_for_inherited_connections(self, sleep: Any = time.sleep) -> float:
        """Sleep until the parent's cached connections have expired; returns the seconds slept."""
        remaining = self.inherited_until - time.monotonic()
        self.inherited_until = 0.0
        if remaining <= 0:
            return 0.0
        sleep(remaining)
        return remaining


_CLOCK = _ReadClock()
#: Every live hdfs-native client of this process (weakly), so that a forked child can keep them.
_CLIENTS: weakref.WeakSet[Any] = weakref.WeakSet()
#: In a forked child: the parent's clients, kept alive for good (dropping one there hangs).
_INHERITED: list[Any] = []


def _after_fork_in_child() -> None:
    _INHERITED.extend(_CLIENTS)
    _CLOCK.forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _TimedReader(FileReader):
    """hdfs-native's ``FileReader``, noting when each read ends (see :class:`_ReadClock`)."""

    def read(self, size: int = -1) -> bytes:
        _CLOCK.begin()
        try:
            return super().read(size)
        finally:
            _CLOCK.end()

    def read_range(self, offset: int, len: int) -> bytes:
        _CLOCK.begin()
        try:
            return super().read_range(offset, len)
        finally:
            _CLOCK.end()

    def read_range_stream(self, offset: int, len: int) -> Iterator[bytes]:
        _CLOCK.begin()
        try:
            yield from super().read_range_stream(offset, len)
        finally:
            _CLOCK.end()


class ForkSafeHdfsFileSystem(HdfsNativeFixes, HdfsFileSystem):
    """hdfs-native's fsspec ``HdfsFileSystem`` (same arguments: ``host``, ``port``, Hadoop
    properties as keyword arguments), usable in forked children: see the module's docstring.

    ``client`` is this process's hdfs-native ``Client``, made on first use after a fork from
    the same ``host``, ``port`` and properties. Opening a file in a forked child first waits
    out the parent's cached DataNode connections (up to :data:`DATANODE_CACHE_EXPIRY_S`).
    With :class:`~scalelab.store.access.hdfs_fixes.HdfsNativeFixes` (``rm`` of a list, a correct
    ``cp_file``, mode ``"xb"``).

    A file opened for reading reads ahead (:class:`~scalelab.store.access.readahead.ReadAheadFile`):
    ``block_size`` bytes per DataNode request, ``default_block_size`` (1 MiB) when ``open`` is
    given none; ``block_size=0`` (or ``default_block_size=0``) gives hdfs-native's own file,
    one request per read.
    """

    def __init__(
        self, *args: Any, default_block_size: int = DEFAULT_BLOCK_SIZE, **storage_options: Any
    ) -> None:
        super().__init__(*args, **storage_options)
        self.default_block_size = int(default_block_size)

    @property
    def client(self) -> Any:
        if self._client_pid != os.getpid():
            hadoop = {k: v for k, v in self.storage_options.items() if k != "default_block_size"}
            fresh = HdfsFileSystem(*self.storage_args, skip_instance_cache=True, **hadoop)
            self.client = fresh.client  # the inherited one stays in _INHERITED
        return self._client

    @client.setter
    def client(self, value: Any) -> None:
        self._client = value
        self._client_pid = os.getpid()
        _CLIENTS.add(value)

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None, **kwargs: Any):
        _CLOCK.wait_for_inherited_connections()
        if mode == "xb":
            return self._exclusive(path, mode, block_size=block_size, **kwargs)
        if mode != "rb":
            return super()._open(path, mode, block_size=block_size, **kwargs)
        reader = _TimedReader(self.client.read(self._strip_protocol(path)).inner)
        size = self.default_block_size if block_size is None else block_size
        return ReadAheadFile(reader, size) if size else reader
