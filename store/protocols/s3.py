"""A course store in an S3 bucket (AWS, SeaweedFS, MinIO, Ceph): ``s3://bucket/prefix`` (s3fs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import fsspec
from fsspec.implementations.dirfs import DirFileSystem

from scalelab.store.protocols.base import StoreProtocol


class S3Protocol(StoreProtocol):
    """``s3://``: an object store. No folders (``mkdir`` makes nothing), no atomic rename (a data
    set is published object by object, its manifest last); ``endpoint_url`` in the options is
    the server that must answer."""

    schemes = ("s3", "s3a")
    fs_protocols = frozenset({"s3", "s3a"})
    package = "s3fs"
    setting_hint = "the bucket in c.ScaleLabSpawner.store_url and endpoint_url in store_options"
    folders = False

    def probe_addresses(
        self, url: str, options: Mapping[str, Any], environ: Mapping[str, str]
    ) -> list[tuple[str, int]]:
        """The ``endpoint_url`` of the options (or of their ``client_kwargs``); none for AWS."""
        endpoint = options.get("endpoint_url") or (options.get("client_kwargs") or {}).get(
            "endpoint_url"
        )
        if not endpoint:
            return []
        parts = urlsplit(endpoint)
        return [(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))]

    def remove_tree(self, fs: fsspec.AbstractFileSystem, path: str) -> None:
        """Remove ``path``'s objects, then each folder left, deepest first.

        S3 servers with a real file system behind them (SeaweedFS's filer) keep a folder after
        its last object is deleted, and list it; fsspec's ``rm`` deletes objects only. So each
        folder left is deleted as the key ``<folder>/`` (a no-op where no such key exists, as on
        AWS), and a reader listing the parent sees nothing of it.
        """
        super().remove_tree(fs, path)
        from fsspec.asyn import sync

        base = fs.fs if isinstance(fs, DirFileSystem) else fs
        base.invalidate_cache()
        for folder in _folders_deepest_first(fs, path):
            full = f"{fs.path}/{folder}" if isinstance(fs, DirFileSystem) else folder
            bucket, key, _ = base.split_path(full)
            sync(base.loop, base._call_s3, "delete_object", Bucket=bucket, Key=f"{key}/")
        base.invalidate_cache()


def _folders_deepest_first(fs: fsspec.AbstractFileSystem, path: str) -> list[str]:
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        if entry["type"] == "directory" and entry["name"].rstrip("/") != path.rstrip("/"):
            found += _folders_deepest_first(fs, entry["name"])
    return [*found, path]
