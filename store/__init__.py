"""The course store: one URL for the course's data, the same on a laptop and on a cluster.

Public API (``scalelab.store``):

- :func:`open_store` -- an fsspec file system rooted at the course store;
- :func:`store_url` -- the full URL of a path in the store, for Spark or ``fsspec.open``;
- :data:`DATASETS` and :func:`fetch_dataset` -- the course data sets, and how they get into
  the store.

The store is configured once, by ops, as ``ScaleLabSpawner.store_url`` and
``ScaleLabSpawner.store_options``; the spawner hands both to every single-user server as
``SCALELAB_STORE_URL`` and ``SCALELAB_STORE_OPTIONS`` (JSON), where this module reads them.
"""

from scalelab.store.catalog import DATASETS, DatasetSpec, FileSpec
from scalelab.store.errors import ChecksumError, DataSourceError, StoreConfigError, StoreError
from scalelab.store.fetch import fetch_dataset, missing_datasets
from scalelab.store.fs import (
    ENV_STORE_OPTIONS,
    ENV_STORE_URL,
    open_store,
    store_settings,
    store_url,
)

__all__ = [
    "DATASETS",
    "ENV_STORE_OPTIONS",
    "ENV_STORE_URL",
    "ChecksumError",
    "DataSourceError",
    "DatasetSpec",
    "FileSpec",
    "StoreConfigError",
    "StoreError",
    "fetch_dataset",
    "missing_datasets",
    "open_store",
    "store_settings",
    "store_url",
]
