"""Errors of the course store and the data sets.

Class tree::

    StoreError (Exception)
    ├── StoreConfigError (also ValueError)  -- the store URL or storage_options are wrong
    ├── StoreUnavailableError (also ConnectionError) -- the store cannot be reached (now)
    ├── StoreAccessError (also PermissionError)     -- a path outside the student's part of it
    ├── DataSourceError                     -- no source could deliver a data set file
    └── ChecksumError                       -- a file's bytes do not match its known SHA-256

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
