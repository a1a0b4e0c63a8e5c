"""The course data sets (``scalelab.store.datasets``).

- :mod:`~scalelab.store.datasets.catalog` -- their files, checksums and sources;
- :mod:`~scalelab.store.datasets.fetch` -- ``scalelab data fetch``: checked, complete, atomic;
- :mod:`~scalelab.store.datasets.shards` -- original files -> Parquet shards;
- :mod:`~scalelab.store.datasets.csvtable` -- a zipped CSV table -> Parquet shards (``msd-full``).
"""
