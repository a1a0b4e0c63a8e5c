"""Store URL and ``storage_options`` -> an fsspec file system rooted at the course store."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import fsspec
from fsspec.implementations.dirfs import DirFileSystem

from scalelab import envvars
from scalelab.store import protocols
from scalelab.store.errors import StoreConfigError

ENV_STORE_URL = envvars.STORE_URL
ENV_STORE_OPTIONS = envvars.STORE_OPTIONS


def store_settings(environ: Mapping[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    """Read the store URL and its ``storage_options`` from the environment.

    Parameters
    ----------
    environ
        The environment to read; ``os.environ`` when None.

    Returns
    -------
    (url, storage_options)
        ``url`` as ops configured it (e.g. ``file:///srv/course``, ``hdfs://nn:8020/course``);
        ``storage_options`` a dict, empty when unset.

    Raises
    ------
    StoreConfigError
        ``SCALELAB_STORE_URL`` is unset or empty, or ``SCALELAB_STORE_OPTIONS`` is not a JSON
        object.
    """
    env = os.environ if environ is None else environ
    url = env.get(ENV_STORE_URL, "").strip()
    if not url:
        raise StoreConfigError(
            f"{ENV_STORE_URL} is not set: the course store URL is unknown. On the hub set "
            "c.ScaleLabSpawner.store_url; elsewhere export SCALELAB_STORE_URL=file:///path/to/store."
        )
    return url, store_options_from_env(env)


#: The fix for a bad ``SCALELAB_STORE_OPTIONS``: the value read is the variable's, wherever it
#: was set (the hub's spawner always writes valid JSON from ``c.ScaleLabSpawner.store_options``).
_OPTIONS_FIX = (
    f"set {ENV_STORE_OPTIONS} to a JSON object of the store's storage_options, e.g. "
    f"""export {ENV_STORE_OPTIONS}='{{"anon": true}}', or unset it."""
)


def store_options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The store's ``storage_options`` from ``SCALELAB_STORE_OPTIONS`` (a JSON object).

    Returns
    -------
    dict
        Empty when the variable is unset or blank.

    Raises
    ------
    StoreConfigError
        The value is not valid JSON, or not a JSON object.
    """
    env = os.environ if environ is None else environ
    raw = env.get(ENV_STORE_OPTIONS, "").strip() or "{}"
    try:
        options = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise StoreConfigError(
            f"{ENV_STORE_OPTIONS} is not valid JSON ({exc.msg} at character {exc.pos}); "
            f"{_OPTIONS_FIX}"
        ) from None
    if not isinstance(options, dict):
        raise StoreConfigError(
            f"{ENV_STORE_OPTIONS} must be a JSON object, not {type(options).__name__}; "
            f"{_OPTIONS_FIX}"
        )
    return options


class StoreFileSystem(DirFileSystem):
    """fsspec's ``DirFileSystem`` that keeps a path's trailing ``/`` when it hands the path on.

    fsspec's generic ``cp``, ``get`` and ``put`` read a trailing ``/`` on the destination (or a
    source folder) as "into this folder"; ``DirFileSystem`` strips it before the wrapped file
    system sees it, so ``cp("a.txt", "new/")`` made a file named ``new`` and
    ``get("dir/", "out/", recursive=True)`` made ``out/dir/`` (fsspec issue #1851). Here the
    wrapped file system gets ``<root>/new/`` and does what it does for its own paths.

    A store at its file system's root (``hdfs://namenode:8020/``) works too: ``DirFileSystem``
    joins ``"/" + "/" + "x"`` and, listing, asserts that ``/x`` starts with ``//``
    (``AssertionError`` from every ``ls`` of a non-empty folder); here the root's paths are
    ``/x`` both ways.
    """

    def _at_root(self) -> bool:
        return self.path == self.fs.sep

    def _join(self, path: Any) -> Any:
        if isinstance(path, str) and path and self._at_root():
            joined = self.fs.sep + self._strip_protocol(path).lstrip(self.fs.sep)
        else:
            joined = super()._join(path)  # lists and dicts come back here, one path each
        if isinstance(path, str) and path.endswith("/") and not joined.endswith(self.fs.sep):
            return joined + self.fs.sep
        return joined

    def _relpath(self, path: Any) -> Any:
        if isinstance(path, str) and self._at_root():
            return path.lstrip(self.fs.sep)
        return super()._relpath(path)  # lists come back here, one path each


def open_store(
    url: str | None = None, storage_options: Mapping[str, Any] | None = None
) -> StoreFileSystem:
    """Open the course store as an fsspec file system whose paths are relative to the store root.

    Parameters
    ----------
    url
        Store URL, any fsspec protocol (``file://``, ``hdfs://``, ``s3://`` ...). None reads
        ``SCALELAB_STORE_URL`` (and then ``storage_options`` from ``SCALELAB_STORE_OPTIONS``).
    storage_options
        Keyword arguments for the protocol's file system (fsspec's ``storage_options``).

    Returns
    -------
    StoreFileSystem
        A ``DirFileSystem`` that keeps trailing ``/`` (``cp``, ``get`` and ``put`` into
        ``"dir/"`` act as on the store's own file system);
        ``fs.open("datasets/millionsong/raw/millionsong.txt")`` opens that file in the store.
        A local (``file://``) store's root folder is created if missing, and writing a file
        creates its parent folders, as on an object store.

    Raises
    ------
    StoreConfigError
        The URL is unset, names a protocol that fsspec does not know or whose package is not
        installed, or the options are rejected by the file system.
    """
    if url is None:
        url, env_options = store_settings()
        storage_options = {**env_options, **(storage_options or {})}
    fs, root = open_target(url, storage_options)
    return StoreFileSystem(path=root, fs=fs, skip_instance_cache=True)


def open_target(
    url: str, storage_options: Mapping[str, Any] | None = None
) -> tuple[fsspec.AbstractFileSystem, str]:
    """The file system of ``url`` and the store root's path in it (for :func:`open_store`).

    Every call makes a new file system instance (``skip_instance_cache``), so one user's
    credentials in ``storage_options`` are never handed to a later caller with other options.
    The URL's protocol opens it (:meth:`~scalelab.store.protocols.base.StoreProtocol.open`:
    ``hdfs://`` through hdfs-native, else pyarrow's libhdfs).

    Raises
    ------
    StoreConfigError
        Unknown protocol, its package missing, or options the file system rejects.
    """
    options = {**(storage_options or {}), "skip_instance_cache": True}
    try:
        fs, root = protocols.for_url(url).open(url, options)
    except (ValueError, ImportError, TypeError) as exc:
        if isinstance(exc, StoreConfigError):
            raise
        raise StoreConfigError(
            f"cannot open the course store {url!r}: {exc}. Check the store URL "
            "(c.ScaleLabSpawner.store_url) and its storage_options."
        ) from None
    return fs, root


def store_url(path: str = "", url: str | None = None) -> str:
    """Full URL of ``path`` inside the store, for readers that take URLs (Spark, ``fsspec.open``).

    Parameters
    ----------
    path
        Path relative to the store root, e.g. ``"datasets/millionsong/parquet"``.
    url
        Store URL; None reads ``SCALELAB_STORE_URL``.

    Returns
    -------
    str
        ``url`` and ``path`` joined with exactly one ``/``.

    Raises
    ------
    StoreConfigError
        ``url`` is None and ``SCALELAB_STORE_URL`` is unset; or ``path`` is absolute or leaves the
        store with ``..``.
    """
    base = store_settings()[0] if url is None else url
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if path.startswith("/") or ".." in parts:
        raise StoreConfigError(f"store paths are relative to the store root; {path!r} is not.")
    return "/".join([base.rstrip("/"), *parts]) if parts else base.rstrip("/")
