"""Streaming datasets from the course store, for PyTorch and tf.data (``scalelab.store.streaming``).

Public names, imported on first use (PyTorch and TensorFlow are heavy):
:class:`TorchParquetDataset`, :func:`tf_dataset`, :func:`write_tfrecord_shards`.

- :mod:`~scalelab.store.streaming.torch_dataset` -- :class:`TorchParquetDataset`;
- :mod:`~scalelab.store.streaming.tfdata` -- tf.data over Parquet and TFRecord shards;
- :mod:`~scalelab.store.streaming.tfrecord` -- TFRecord framing through any fsspec file;
- :mod:`~scalelab.store.streaming.parquet_stream` -- Parquet shards in bounded memory, shuffled;
- :mod:`~scalelab.store.streaming.blocks` -- one shuffle buffer -> one block of arrays;
- :mod:`~scalelab.store.streaming.shard_plan` -- which shards a reader reads, in which order;
- :mod:`~scalelab.store.streaming.shared_batches` -- batches built in shared memory.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "TorchParquetDataset": "scalelab.store.streaming.torch_dataset",
    "tf_dataset": "scalelab.store.streaming.tfdata",
    "write_tfrecord_shards": "scalelab.store.streaming.tfdata",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'scalelab.store.streaming' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value
