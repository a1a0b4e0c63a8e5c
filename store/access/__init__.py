"""Reaching the course store (``scalelab.store.access``).

- :mod:`~scalelab.store.access.fs` -- store URL and ``storage_options`` -> an fsspec file system;
- :mod:`~scalelab.store.access.hdfs` -- HDFS: Hadoop configuration, HA, Kerberos, the client;
- :mod:`~scalelab.store.access.guard` -- which paths a student may see and write (pure);
- :mod:`~scalelab.store.access.student` -- a student's guarded view of the store;
- :mod:`~scalelab.store.access.check` -- the cheap up-front check at kernel start;
- :mod:`~scalelab.store.access.session` -- ``store`` in a kernel;
- :mod:`~scalelab.store.access.cache` -- a bounded local cache for libraries that need a path.
"""
