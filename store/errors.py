"""Errors of the course store and the data sets.

Class tree::

    StoreError (Exception)
    ├── StoreConfigError (also ValueError)  -- the store URL or storage_options are wrong
    ├── DataSourceError                     -- no source could deliver a data set file
    └── ChecksumError                       -- a file's bytes do not match its known SHA-256

Every message names the file or setting at fault and what to do about it.
"""


class StoreError(Exception):
    """Base class of ScaleLab's store and data set errors."""


class StoreConfigError(StoreError, ValueError):
    """The store URL or its ``storage_options`` cannot be used."""


class DataSourceError(StoreError):
    """No source (mirror, Debian package, upstream address) could deliver a file."""


class ChecksumError(StoreError):
    """A file's bytes do not match the SHA-256 recorded for it; the file was refused."""
