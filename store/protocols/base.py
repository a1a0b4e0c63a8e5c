"""The interface of one kind of course store (:class:`StoreProtocol`), and the plain fsspec one.

A protocol module (``local``, ``s3``, ``hdfs``) subclasses :class:`StoreProtocol` and is
registered in :mod:`scalelab.store.protocols`; the student's view, the up-front check, the
fetcher, the spawner's store identities and ``scalelab doctor`` ask it, never the URL's scheme.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import fsspec

#: What to check when a store's server cannot be reached, where its protocol says nothing finer.
GENERIC_HINT = "c.ScaleLabSpawner.store_url and its store_options"


class StoreProtocol:
    """One kind of course store: what ScaleLab must know of it beyond fsspec's file system.

    Class attributes describe it; the methods have the plain fsspec behaviour and are overridden
    where a store needs more. Instances hold no state: one per protocol is registered.
    """

    #: URL schemes it serves, the first its name (``("s3", "s3a")``).
    schemes: ClassVar[tuple[str, ...]] = ()
    #: ``protocol`` values of the fsspec file systems it opens (to recognise an open one).
    fs_protocols: ClassVar[frozenset[str]] = frozenset()
    #: The pip package of its fsspec back end, named when it is missing.
    package: ClassVar[str] = "fsspec"
    #: The settings to check when its server cannot be reached (ends a sentence "Check ...").
    setting_hint: ClassVar[str] = GENERIC_HINT
    #: Files on this machine's disk: links are resolved and checked, writes are atomic renames.
    local: ClassVar[bool] = False
    #: Real folders (False for an object store: a folder is there once a file is in it).
    folders: ClassVar[bool] = True
    #: A folder moves in one atomic step (a data set is published by a rename).
    atomic_rename: ClassVar[bool] = False
    #: Reached with Hadoop's client configuration (``scalelab doctor`` checks the namenode and,
    #: where the cluster requires it, the Kerberos ticket).
    hadoop: ClassVar[bool] = False

    @property
    def name(self) -> str:
        """The protocol's name: its first scheme (``"s3"``)."""
        return self.schemes[0]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {'/'.join(self.schemes)}>"

    def open(self, url: str, options: dict[str, Any]) -> tuple[fsspec.AbstractFileSystem, str]:
        """The file system of ``url`` and the store root's path in it.

        ``options`` are the store's ``storage_options`` (``skip_instance_cache`` set). Raises what
        the back end raises for a bad URL or options (``ValueError``, ``ImportError``,
        ``TypeError``; the caller words them), or ``StoreConfigError``.
        """
        return fsspec.core.url_to_fs(url, **options)

    def check_environment(
        self, url: str, options: Mapping[str, Any], environ: Mapping[str, str]
    ) -> None:
        """Check, without touching the store, what the client needs besides the URL (a Kerberos
        ticket, a client library). Raises ``StoreConfigError`` naming the fix."""

    def probe_addresses(
        self, url: str, options: Mapping[str, Any], environ: Mapping[str, str]
    ) -> list[tuple[str, int]]:
        """The ``(host, port)`` servers the store needs, of which one must answer; none known."""
        return []

    def unreachable_message(
        self, url: str, exc: BaseException, environ: Mapping[str, str]
    ) -> str | None:
        """One line for the store's server not answering ``exc``; None for the plain wording."""
        return None

    def failure(self, url: str, exc: BaseException) -> Exception | None:
        """``exc`` from a store call as ScaleLab's one-line error (an expired ticket, a refusal
        by the store's own permissions), or None to keep it as it is."""
        return None

    def remove_tree(self, fs: fsspec.AbstractFileSystem, path: str) -> None:
        """Remove ``path`` of ``fs`` (the store's own file system, or one rooted in it) and
        everything under it, folders included, if it exists."""
        if fs.exists(path):
            fs.rm(path, recursive=True)


#: pip packages of fsspec protocols without a module of their own here.
OTHER_PACKAGES = {"gcs": "gcsfs", "gs": "gcsfs", "abfs": "adlfs", "az": "adlfs"}


class FsspecProtocol(StoreProtocol):
    """Any other protocol fsspec knows (``gcs://``, ``memory://``): its file system as it is."""

    def __init__(self, scheme: str) -> None:
        self.schemes = (scheme,)
        self.fs_protocols = frozenset({scheme})
        self.package = OTHER_PACKAGES.get(scheme, f"the fsspec back end of {scheme}://")
