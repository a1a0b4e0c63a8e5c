"""Streaming datasets from the course store, for PyTorch and tf.data (``scalelab.store.streaming``).

Public names, imported on first use (PyTorch and TensorFlow are heavy):
:class:`TorchParquetDataset`, :func:`tf_dataset`, :func:`write_tfrecord_shards`. The modules
are listed in docs/architecture.md, "Every module".
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
