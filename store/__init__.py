"""The course store: one URL for the course's data, the same on a laptop and on a cluster.

Public API (``scalelab.store``):

- :func:`open_store` -- an fsspec file system rooted at the course store;
- :func:`student_store` -- a student's part of it: ``home/<user>`` read-write, ``datasets/``
  read-only (also the JupyterLab drive, protocol ``scalelab://``);
- :func:`check_store` -- the cheap up-front check a kernel runs at start;
- :func:`store_url` -- the full URL of a path in the store, for Spark or ``fsspec.open``;
- :data:`DATASETS` and :func:`fetch_dataset` -- the course data sets, and how they get into
  the store (:data:`ALL_DATASETS` adds the optional ones, e.g. ``msd-full``).

The store is configured once, by ops, as ``ScaleLabSpawner.store_url`` and
``ScaleLabSpawner.store_options``; the spawner hands both to every single-user server as
``SCALELAB_STORE_URL`` and ``SCALELAB_STORE_OPTIONS`` (JSON), where this module reads them.
"""

from scalelab.store.access.check import check_store
from scalelab.store.access.fs import (
    ENV_STORE_OPTIONS,
    ENV_STORE_URL,
    open_store,
    store_settings,
    store_url,
)
from scalelab.store.access.student import StudentStore, student_store
from scalelab.store.datasets.catalog import (
    ALL_DATASETS,
    DATASETS,
    CsvTableSpec,
    DatasetSpec,
    FileSpec,
)
from scalelab.store.datasets.fetch import fetch_dataset, missing_datasets
from scalelab.store.errors import (
    ChecksumError,
    ContentCheckError,
    DataSourceError,
    StoreAccessError,
    StoreConfigError,
    StoreError,
    StoreUnavailableError,
)

__all__ = [
    "ALL_DATASETS",
    "DATASETS",
    "ENV_STORE_OPTIONS",
    "ENV_STORE_URL",
    "ChecksumError",
    "ContentCheckError",
    "CsvTableSpec",
    "DataSourceError",
    "DatasetSpec",
    "FileSpec",
    "StoreAccessError",
    "StoreConfigError",
    "StoreError",
    "StoreUnavailableError",
    "StudentStore",
    "check_store",
    "fetch_dataset",
    "missing_datasets",
    "open_store",
    "store_settings",
    "store_url",
    "student_store",
]
