"""The course store: one URL for the course's data, the same on a laptop and on a cluster.

Public API (``scalelab.store``):

- :func:`open_store` -- an fsspec file system rooted at the course store
  (:class:`StoreFileSystem`, which keeps a trailing ``/`` as fsspec's own file systems do); in
  a student's server, without a URL, their guarded view (as :func:`student_store`);
- :func:`student_store` -- a student's part of it: ``home/<user>`` read-write, ``datasets/``
  read-only (also the JupyterLab drive, protocol ``scalelab://``);
- :func:`check_store` -- the cheap up-front check a kernel runs at start;
- :func:`store_url` -- the full URL of a path in the store, for Spark or ``fsspec.open``;
- :data:`DATASETS` and :func:`fetch_dataset` -- the course data sets, and how they get into
  the store (:data:`ALL_DATASETS` adds the optional ones, e.g. ``msd-full``).

Subpackages: :mod:`~scalelab.store.access` (reaching the store: URL -> fsspec, HDFS, the
student's guarded view, checks, the local cache), :mod:`~scalelab.store.datasets` (catalogue,
fetch, shards) and :mod:`~scalelab.store.streaming` (PyTorch and tf.data datasets);
:mod:`~scalelab.store.errors` holds the errors of all three. The names above are imported on
first use.

The store is configured once, by ops, as ``ScaleLabSpawner.store_url`` and
``ScaleLabSpawner.store_options``; the spawner hands both to every single-user server as
``SCALELAB_STORE_URL`` and ``SCALELAB_STORE_OPTIONS`` (JSON), where this module reads them.
"""

from __future__ import annotations

from scalelab.common.lazy import lazy_exports

#: Public name -> the module that defines it, imported on first use: a light module of the
#: store (``scalelab.store.errors``) then does not pull in fsspec's back ends and pyarrow.
_PUBLIC = {
    **dict.fromkeys(
        ["ALL_DATASETS", "DATASETS", "CsvTableSpec", "DatasetSpec", "FileSpec"],
        "scalelab.store.datasets.catalog",
    ),
    **dict.fromkeys(["fetch_dataset", "missing_datasets"], "scalelab.store.datasets.fetch"),
    **dict.fromkeys(
        [
            "ChecksumError",
            "ContentCheckError",
            "DataSourceError",
            "KerberosTicketError",
            "StoreAccessError",
            "StoreConfigError",
            "StoreError",
            "StoreUnavailableError",
        ],
        "scalelab.store.errors",
    ),
    "check_store": "scalelab.store.access.check",
    **dict.fromkeys(
        [
            "ENV_STORE_OPTIONS",
            "ENV_STORE_URL",
            "StoreFileSystem",
            "store_settings",
            "store_url",
        ],
        "scalelab.store.access.fs",
    ),
    **dict.fromkeys(
        ["StudentStore", "open_store", "student_store"], "scalelab.store.access.student"
    ),
}
__all__ = sorted(_PUBLIC)

__getattr__ = lazy_exports(__name__, _PUBLIC)
