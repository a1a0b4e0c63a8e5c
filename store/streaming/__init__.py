"""Streaming datasets from the course store, for PyTorch and tf.data (``scalelab.store.streaming``).

Public names, imported on first use (PyTorch and TensorFlow are heavy):
:class:`TorchParquetDataset`, :func:`tf_dataset`, :func:`write_tfrecord_shards`.

- :mod:`~scalelab.store.streaming.torch_dataset` -- :class:`TorchParquetDataset`;
- :mod:`~scalelab.store.streaming.tfdata` -- tf.data over Parquet and TFRecord shards;
- :mod:`~scalelab.store.streaming.tfrecord` -- TFRecord framing through any fsspec file;
- :mod:`~scalelab.store.streaming.parquet_stream` -- Parquet shards in bounded memory, shuffled;
- :mod:`~scalelab.store.streaming.threaded` -- the same decoded by a pool of threads (row groups);
- :mod:`~scalelab.store.streaming.blocks` -- one shuffle buffer -> one block of arrays;
- :mod:`~scalelab.store.streaming.shard_plan` -- which shards a reader reads, in which order;
- :mod:`~scalelab.store.streaming.shared_batches` -- batches built in shared memory.
"""

from __future__ import annotations

from scalelab.common.lazy import lazy_exports

_PUBLIC = {
    "TorchParquetDataset": "scalelab.store.streaming.torch_dataset",
    "tf_dataset": "scalelab.store.streaming.tfdata",
    "write_tfrecord_shards": "scalelab.store.streaming.tfdata",
}
__all__ = sorted(_PUBLIC)

__getattr__ = lazy_exports(__name__, _PUBLIC)
