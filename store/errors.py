"""Errors of the course store and the data sets.

Class tree::

    StoreError (Exception)
    ├── StoreConfigError (also ValueError)  -- the store URL or storage_options are wrong
    ├── StoreUnavailableError (also ConnectionError) -- the store cannot be reached (now)
    ├── StoreAccessError (also PermissionError)     -- a path outside the student's part of it
    ├── DataSourceError                     -- no source could deliver a data set file
    ├── ChecksumError                       -- a file's bytes do not match its known SHA-256
    └── ContentCheckError                   -- a file without a checksum breaks a content rule

Every message names the file or setting at fault and what to do about it.
"""


class StoreError(Exception):
    """Base class of ScaleLab's store and data set errors."""


class StoreConfigError(StoreError, ValueError):
    """The store URL or its ``storage_options`` cannot be used."""


class StoreUnavailableError(StoreError, ConnectionError):
    """The store is configured but cannot be reached: namenode or endpoint down, root gone."""


class StoreAccessError(StoreError, PermissionError):
    """A path outside the student's home and the read-only data sets, or a write to the latter."""


class DataSourceError(StoreError):
    """No source (mirror, Debian package, upstream address) could deliver a file."""


class ChecksumError(StoreError):
    """A file's bytes do not match the SHA-256 recorded for it; the file was refused."""


class ContentCheckError(StoreError):
    """A file checked by its content (no published checksum) breaks a rule of its catalogue entry:
    the message names the file, the line and the rule; the file was refused."""


def store_failure(url: str, exc: BaseException) -> StoreError:
    """``exc`` (raised by a store call) as a one-line :class:`StoreError` naming ``url``.

    A :class:`StoreError` is returned as is. Anything else -- fsspec back ends raise their own
    errors (botocore's ``NoCredentialsError``, ``ClientError``, hdfs-native's ...) -- becomes a
    :class:`StoreUnavailableError` that names the store, the error and what to check.
    """
    if isinstance(exc, StoreError):
        return exc
    detail = " ".join(str(exc).split())[:300] or "no details"
    return StoreUnavailableError(
        f"the course store {url} cannot be read: {type(exc).__name__}: {detail}. Check the store "
        "URL (--store or c.ScaleLabSpawner.store_url), its credentials (for s3://: "
        "AWS_ACCESS_KEY_ID / ~/.aws/credentials or store_options) and that it is reachable."
    )
