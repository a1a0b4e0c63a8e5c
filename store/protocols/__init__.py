"""Kinds of course store, one module each: ``local``, ``s3``, ``hdfs`` (and WebHDFS).

:func:`for_url` and :func:`for_fs` give the :class:`~scalelab.store.protocols.base.StoreProtocol`
of a store URL or an open file system; another protocol fsspec knows gets the plain
:class:`~scalelab.store.protocols.base.FsspecProtocol`. A new kind is a module with a subclass
and one :func:`register` call (docs/architecture.md, "Add a store protocol").
"""

from __future__ import annotations

from pathlib import Path

import fsspec
from fsspec.implementations.dirfs import DirFileSystem

from scalelab.store.protocols.base import FsspecProtocol, StoreProtocol
from scalelab.store.protocols.hdfs import HDFSProtocol, WebHDFSProtocol
from scalelab.store.protocols.local import LocalProtocol
from scalelab.store.protocols.s3 import S3Protocol

__all__ = [
    "FsspecProtocol",
    "HDFSProtocol",
    "LocalProtocol",
    "S3Protocol",
    "StoreProtocol",
    "WebHDFSProtocol",
    "for_fs",
    "for_url",
    "local_folder",
    "register",
    "registered",
    "scheme_of",
]

_BY_SCHEME: dict[str, StoreProtocol] = {}


def register(protocol: StoreProtocol) -> StoreProtocol:
    """Serve ``protocol.schemes`` with ``protocol`` from now on (a later one wins); returns it."""
    for scheme in protocol.schemes:
        _BY_SCHEME[scheme] = protocol
    return protocol


def registered() -> tuple[StoreProtocol, ...]:
    """The registered protocols, each once, in the order of registration."""
    return tuple(dict.fromkeys(_BY_SCHEME.values()))


def scheme_of(url: str) -> str:
    """The scheme of a store URL (``"s3"``); ``"file"`` for a plain path (pure)."""
    return fsspec.core.split_protocol(url)[0] or "file"


def for_url(url: str) -> StoreProtocol:
    """The protocol of a store URL (a plain path is ``file``); a plain fsspec one when none is
    registered for its scheme (whether fsspec knows it is the caller's check)."""
    scheme = scheme_of(url)
    return _BY_SCHEME.get(scheme) or FsspecProtocol(scheme)


def local_folder(url: str) -> Path | None:
    """The folder of a local store's ``url`` (``file://`` URL or plain path), None for another
    protocol or an empty path (pure)."""
    return LocalProtocol.folder(url) if for_url(url).local else None


def for_fs(fs: fsspec.AbstractFileSystem) -> StoreProtocol:
    """The protocol of an open file system (one rooted in a store, ``DirFileSystem``, is its
    underlying file system's)."""
    base = fs.fs if isinstance(fs, DirFileSystem) else fs
    names = base.protocol if isinstance(base.protocol, tuple) else (base.protocol,)
    for protocol in registered():
        if not protocol.fs_protocols.isdisjoint(names):
            return protocol
    return FsspecProtocol(names[0])


for _protocol in (LocalProtocol(), S3Protocol(), HDFSProtocol(), WebHDFSProtocol()):
    register(_protocol)
