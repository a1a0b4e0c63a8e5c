"""The course store: one URL for the course's data, the same on a laptop and on a cluster.

Public names, imported on first use: :func:`open_store`, :class:`StoreFileSystem`,
:func:`student_store`, :func:`check_store`, :func:`store_url`, :data:`DATASETS`,
:data:`ALL_DATASETS`, :func:`fetch_dataset`; subpackages ``access``, ``datasets``, ``streaming``.
Ops' store URL and options reach servers as ``SCALELAB_STORE_URL`` / ``SCALELAB_STORE_OPTIONS``.
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
