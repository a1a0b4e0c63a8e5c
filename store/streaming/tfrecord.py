"""TFRecord framing read through any fsspec file, without TensorFlow's own file systems.

Reading here lets ``tf.data`` stream TFRecord shards from HDFS, S3 or any other fsspec store
(writing is ``tf.io.TFRecordWriter``'s); the length's CRC is checked, so a file that is not
TFRecord, or is cut short, is refused with its name.
Why: docs/design-notes.md, scalelab.store.streaming.tfrecord.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

from scalelab.store.errors import StoreError

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _table() -> list[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _table()


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data`` (pure Python: meant for the 8-byte length headers)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC: rotate right by 15 bits and add 0xA282EAD8 (mod 2**32)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(f: BinaryIO, name: str = "<file>") -> Iterator[bytes]:
    """The records of the TFRecord file ``f``, each a ``bytes`` (e.g. a serialized Example).

    Raises
    ------
    StoreError
        ``name`` is not a TFRecord file, or it ends inside a record.
    """
    index = 0
    while True:
        header = f.read(12)
        if not header:
            return
        if len(header) < 12:
            raise StoreError(f"{name}: cut short in the header of record {index}")
        (length,) = struct.unpack("<Q", header[:8])
        (crc,) = struct.unpack("<I", header[8:])
        if crc != masked_crc32c(header[:8]):
            raise StoreError(
                f"{name}: record {index} has a bad length checksum: not a TFRecord file, "
                "or it is corrupt"
            )
        data = f.read(length + 4)
        if len(data) < length + 4:
            raise StoreError(f"{name}: cut short inside record {index}")
        yield data[:length]
        index += 1
