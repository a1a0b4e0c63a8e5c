"""A course store in a folder of this machine (``file://`` or a plain path; NFS is one too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import make_path_posix

from scalelab.store.protocols.base import StoreProtocol


class LocalProtocol(StoreProtocol):
    """``file://``: fsspec's local file system; links are checked where they lead, writes are
    atomic renames, the root folder is made when missing and writing a file makes its folders
    (as on an object store)."""

    schemes = ("file", "local")
    fs_protocols = frozenset({"file", "local"})
    setting_hint = "the folder in c.ScaleLabSpawner.store_url (is it mounted?)"
    local = True
    atomic_rename = True

    def open(self, url: str, options: dict[str, Any]) -> tuple[fsspec.AbstractFileSystem, str]:
        fs, root = fsspec.core.url_to_fs(url, **{"auto_mkdir": True, **options})
        fs.makedirs(root, exist_ok=True)
        return fs, root

    @staticmethod
    def folder(url: str) -> Path | None:
        """The folder of a local store's ``url`` (``file://`` URL or plain path), None for an
        empty one (pure)."""
        path = fsspec.core.split_protocol(url)[1]
        return Path(make_path_posix(path)) if path else None
