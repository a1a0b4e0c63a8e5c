"""Errors of the course store and the data sets.

Class tree::

    StoreError (Exception)
    ├── StoreConfigError (also ValueError)  -- the store URL or storage_options are wrong
    │   └── KerberosTicketError             -- no valid Kerberos ticket (none, or expired)
    ├── StoreUnavailableError (also ConnectionError) -- the store cannot be reached (now)
    ├── StoreAccessError (also PermissionError)     -- a path outside the student's part of it
    ├── StoreFullError                      -- a disk or quota is full (ENOSPC, EDQUOT)
    ├── DataSourceError                     -- no source could deliver a data set file
    ├── ChecksumError                       -- a file's bytes do not match its known SHA-256
    └── ContentCheckError                   -- a file without a checksum breaks a content rule

Every message names the file or setting at fault and what to do about it.
"""

from __future__ import annotations

import os

from scalelab.common.diskspace import full_disk_message, is_disk_full


class StoreError(Exception):
    """Base class of ScaleLab's store and data set errors."""


class StoreConfigError(StoreError, ValueError):
    """The store URL or its ``storage_options`` cannot be used."""


class KerberosTicketError(StoreConfigError):
    """A Kerberos cluster and no valid ticket: none in the cache, or an expired one. The message
    names the ``kinit`` command with the principal and keytab
    (:mod:`scalelab.store.access.kerberos`)."""


class StoreUnavailableError(StoreError, ConnectionError):
    """The store is configured but cannot be reached: namenode or endpoint down, root gone."""


class StoreAccessError(StoreError, PermissionError):
    """A path outside the student's home and the read-only data sets, or a write to the latter."""


class StoreFullError(StoreError):
    """A write stopped on a full disk or quota (``ENOSPC``, ``EDQUOT``): the message names the
    disk (its mount, free and total space), how much more is needed when known, and the fix."""


class DataSourceError(StoreError):
    """No source (mirror, Debian package, upstream address) could deliver a file."""


class ChecksumError(StoreError):
    """A file's bytes do not match the SHA-256 recorded for it; the file was refused."""


class ContentCheckError(StoreError):
    """A file checked by its content (no published checksum) breaks a rule of its catalogue entry:
    the message names the file, the line and the rule; the file was refused."""


def store_failure(url: str, exc: BaseException) -> StoreError:
    """``exc`` (raised by a store call) as a one-line :class:`StoreError` naming ``url``.

    A :class:`StoreError` is returned as is. A full disk or quota anywhere in ``exc``'s chain
    (:func:`~scalelab.common.diskspace.is_disk_full`) becomes a :class:`StoreFullError` naming
    the disk (see :func:`full_disk_failure`). Anything else -- fsspec back ends raise their own
    errors (botocore's ``NoCredentialsError``, ``ClientError``, hdfs-native's ...) -- becomes a
    :class:`StoreUnavailableError` that names the store, the error and what to check.
    """
    if isinstance(exc, StoreError):
        return exc
    if is_disk_full(exc):
        return full_disk_failure(url, exc)
    detail = _one_line(exc)
    return StoreUnavailableError(
        f"the course store {url} cannot be read: {type(exc).__name__}: {detail}. Check the store "
        "URL (--store or c.ScaleLabSpawner.store_url), its credentials (for s3://: "
        "AWS_ACCESS_KEY_ID / ~/.aws/credentials or store_options) and that it is reachable."
    )


def full_disk_failure(
    url: str,
    exc: BaseException,
    path: str | None = None,
    needed_bytes: int | None = None,
    doing: str | None = None,
) -> StoreFullError:
    """A :class:`StoreFullError` for ``exc``, a full disk or quota met working on the store ``url``.

    Parameters
    ----------
    url
        The store's URL.
    exc
        The error (ENOSPC, EDQUOT, SQLite's "disk is full"), for its file name and text.
    path
        The local path being written; None takes the destination named by the first
        ``OSError`` in ``exc``'s chain, else the folder of a ``file://`` URL.
    needed_bytes
        How many bytes the write needs in all, when known.
    doing
        What stopped, e.g. ``"fetching millionsong"``; by default "writing to the course store
        <url>".

    Returns
    -------
    StoreFullError
        One line: "<doing> stopped: The disk holding <path> (mount ..., N MiB free of M GiB) is
        full: this needs ... Free space there, or ask the operators ..." (see
        :func:`~scalelab.common.diskspace.full_disk_message`). Without a local path (a remote
        store's own disk): the error's text and the same fix.
    """
    doing = doing or f"writing to the course store {url}"
    path = path or _written_path(exc) or _local_root(url)
    if path is None:
        return StoreFullError(
            f"{doing} stopped: the store's disk is full ({_one_line(exc)}). Free space there, or "
            "ask the operators for a bigger disk or quota."
        )
    return StoreFullError(f"{doing} stopped: {full_disk_message(path, needed_bytes)}")


def _written_path(exc: BaseException | None) -> str | None:
    """The destination named by the first OSError in ``exc``'s chain (``filename2`` of a copy,
    else ``filename``), when it is a local absolute path."""
    for _ in range(10):
        if exc is None:
            return None
        if isinstance(exc, OSError):
            name = exc.filename2 or exc.filename
            if isinstance(name, (str, bytes, os.PathLike)):
                name = os.fsdecode(name)
                if os.path.isabs(name):
                    return name
        exc = exc.__cause__ or exc.__context__
    return None


def _local_root(url: str) -> str | None:
    from scalelab.store.protocols import local_folder  # not on this light module's import

    folder = local_folder(url)
    return str(folder) if folder is not None and folder.is_absolute() else None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or "no details"
