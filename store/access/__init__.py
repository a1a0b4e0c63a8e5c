"""Reaching the course store (``scalelab.store.access``).

``fs`` (store URL -> fsspec file system), ``hdfs``, ``guard`` (which paths a student may see,
pure), ``student`` (the guarded view), ``check`` (the up-front check at kernel start),
``session`` (``store`` in a kernel) and ``cache`` (a bounded local cache for path-only libraries).
"""
