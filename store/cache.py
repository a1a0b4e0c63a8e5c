"""A bounded, least-recently-used local cache of store files, for libraries that need a path.

``cv2.imread``, ``tf.io.read_file`` on a local path, ``PIL.Image.open(path)`` and friends cannot
read ``hdfs://`` or ``s3://``. :func:`local_copy` gives them a local file: fsspec's
``simplecache`` layer downloads the whole file once into the cache folder; later calls reuse it.
Unlike fsspec's layers on their own, the cache is bounded: after each call the least recently
used files are removed until the folder holds at most ``max_bytes``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import fsspec
from fsspec.implementations.cached import SimpleCacheFileSystem

from scalelab.store.errors import StoreError
from scalelab.store.fs import open_store

#: Default bound of the local cache: 2 GiB.
DEFAULT_MAX_BYTES = 2 * 2**30


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/scalelab/store`` (``~/.cache/scalelab/store`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "scalelab" / "store"


def local_copy(
    path: str,
    *,
    store: fsspec.AbstractFileSystem | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> str:
    """A local path holding the bytes of the store file ``path``.

    Parameters
    ----------
    path
        A file relative to the store root, e.g. ``"datasets/fashion-mnist/raw/t10k-labels..."``.
    store
        An fsspec file system rooted at the store; None opens :func:`scalelab.store.open_store`.
    cache_dir
        The cache folder; None is :func:`default_cache_dir`. Cached files are named by a hash of
        their store path (no extension).
    max_bytes
        Bound of the cache folder's size in bytes. After the copy, least recently used files
        (by the time :func:`local_copy` last returned them) are removed until the folder fits;
        the file just returned is never removed.

    Returns
    -------
    str
        An absolute local path. Read it soon: a later call that needs room may evict it.

    Raises
    ------
    FileNotFoundError
        ``path`` is not a file in the store.
    StoreError
        The file alone is larger than ``max_bytes``: raise ``max_bytes`` or read it with
        ``store.open``. Nothing is downloaded.

    A cached copy whose size differs from the store file's (changed in the store, or cut short)
    is fetched again.
    """
    if not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes must be a positive integer, not {max_bytes!r}")
    fs = store if store is not None else open_store()
    if not fs.isfile(path):
        raise FileNotFoundError(f"{path!r} is not a file in the course store")
    size = fs.size(path)
    if size > max_bytes:
        raise StoreError(
            f"{path!r} is {size / 2**20:.1f} MiB, more than the local cache's max_bytes "
            f"({max_bytes / 2**20:.1f} MiB): raise max_bytes, or read it with store.open()"
        )
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    cached = SimpleCacheFileSystem(fs=fs, cache_storage=str(folder), skip_instance_cache=True)
    existing = cached._check_file(path)
    if existing and os.path.getsize(existing) != size:
        os.remove(existing)  # stale or partial: fetch it again
    with cached.open(path, "rb") as f:
        local = os.path.abspath(f.name)
    now = time.time()
    os.utime(local, (now, now))  # the LRU clock: last time handed out
    evict(folder, max_bytes, keep=local)
    return local


def evict(folder: Path, max_bytes: int, *, keep: str | None = None) -> list[str]:
    """Remove the least recently used files of ``folder`` until it holds at most ``max_bytes``.

    Returns
    -------
    list of str
        The files removed, oldest first. ``keep`` is never removed.
    """
    entries = []
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False):
            st = entry.stat(follow_symlinks=False)
            entries.append((st.st_mtime, entry.path, st.st_size))
    total = sum(size for _, _, size in entries)
    removed = []
    for _, file, size in sorted(entries):
        if total <= max_bytes:
            break
        if keep is not None and os.path.abspath(file) == keep:
            continue
        try:
            os.remove(file)
        except FileNotFoundError:  # another process evicted it first
            pass
        total -= size
        removed.append(file)
    return removed
