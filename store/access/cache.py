"""A bounded, least-recently-used local cache of store files, for libraries that need a path.

``cv2.imread``, ``tf.io.read_file`` on a local path, ``PIL.Image.open(path)`` and friends cannot
read ``hdfs://`` or ``s3://``. :func:`local_copy` gives them a local file: the whole file is
downloaded once into the cache folder, named by a hash of its path plus its original suffixes
(``.gz`` stays ``.gz``); later calls reuse it. Unlike fsspec's cache layers, the cache is
bounded: after each call the least recently used files are removed until the folder holds at
most ``max_bytes``.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path, PurePosixPath

import fsspec

from scalelab.common.atomicfile import replacing
from scalelab.store.access.student import open_store
from scalelab.store.errors import StoreError

#: Default bound of the local cache: 2 GiB.
DEFAULT_MAX_BYTES = 2 * 2**30


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/scalelab/store`` (``~/.cache/scalelab/store`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "scalelab" / "store"


_SUFFIX = re.compile(r"\.[A-Za-z0-9_-]{1,16}")


def cache_name(path: str) -> str:
    """Name of the cached copy of the store file ``path``: the SHA-256 of the path (as fsspec's
    ``simplecache`` names it) followed by the file name's suffixes, so that libraries that look at
    the extension (``.gz``, ``.tar.gz``, ``.png`` ...) see the original one.

    ``"datasets/fashion-mnist/raw/t10k-labels-idx1-ubyte.gz"`` -> ``"<sha256>.gz"``.
    """
    suffixes = []
    for suffix in reversed(PurePosixPath(path).suffixes):
        if not _SUFFIX.fullmatch(suffix) or len(suffixes) == 4:
            break
        suffixes.insert(0, suffix)
    return hashlib.sha256(path.encode()).hexdigest() + "".join(suffixes)


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

    A copy is downloaded under a temporary name and renamed into place, so no process ever sees
    a partial one; a cached copy whose size differs from the store file's (changed in the
    store) is fetched again.
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
    final = folder / cache_name(path)
    if final.exists() and final.stat().st_size != size:
        final.unlink()  # stale: fetch it again
    if not final.exists():
        # Download under a hidden temporary name, then rename into place: a reader in another
        # process never opens a partial copy.
        with replacing(final) as part:
            fs.get_file(path, str(part))
    local = os.path.abspath(final)
    now = time.time()
    os.utime(local, (now, now))  # the LRU clock: last time handed out
    evict(folder, max_bytes, keep=local)
    return local


def evict(folder: Path, max_bytes: int, *, keep: str | None = None) -> list[str]:
    """Remove the least recently used files of ``folder`` until it holds at most ``max_bytes``.

    Returns
    -------
    list of str
        The files removed, oldest first. ``keep`` is never removed, nor hidden files (downloads
        in progress).
    """
    entries = []
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False) and not entry.name.startswith("."):
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
