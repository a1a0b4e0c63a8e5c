"""The GPU queue on disk, so that it survives a hub restart (a JSON file, written atomically).

Every waiting request (its place, its ``user_options``) is written to
``ScaleLabSpawner.gpu_queue_file`` at each change of the queue (``{"version": 1, "queue": [...]}``)
and started again after a restart by :mod:`scalelab.spawner.hubstart`.
Why: docs/design-notes.md, scalelab.spawner.queue_store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalelab.common.atomicfile import write_atomic
from scalelab.spawner.queue import QueueEntry

#: Version of the file format.
FILE_VERSION = 1


class QueueFileError(ValueError):
    """The queue file cannot be read: not JSON, another version, or a malformed entry."""


@dataclass(frozen=True)
class QueuedSpawn:
    """A waiting request as saved: its queue entry and how to start it again.

    Attributes
    ----------
    entry
        Server key, user, GPUs asked for, original arrival time.
    server_name
        JupyterHub's server name (``""`` for the default server).
    user_options
        The validated options of the attempt (``profile``, ``gpus``, ``spark_driver_memory``).
    """

    entry: QueueEntry
    server_name: str = ""
    user_options: Mapping[str, Any] = field(default_factory=dict)


def dumps(spawns: Sequence[QueuedSpawn]) -> str:
    """The file's text for ``spawns`` (pure)."""
    return json.dumps(
        {
            "version": FILE_VERSION,
            "queue": [
                {
                    "server": s.entry.server,
                    "user": s.entry.user,
                    "server_name": s.server_name,
                    "gpus": s.entry.gpus,
                    "enqueued": s.entry.enqueued,
                    "user_options": dict(s.user_options),
                }
                for s in spawns
            ],
        },
        indent=1,
        sort_keys=True,
    )


def loads(text: str) -> list[QueuedSpawn]:
    """Parse the file's text (pure).

    Raises
    ------
    QueueFileError
        Not JSON, another format version, or an entry with a missing or mistyped field; the
        message names it.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise QueueFileError(f"not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("version") != FILE_VERSION:
        raise QueueFileError(f"expected a JSON object with version {FILE_VERSION}")
    spawns = []
    for index, item in enumerate(data.get("queue", [])):
        try:
            entry = QueueEntry(
                server=_typed(item, "server", str),
                user=_typed(item, "user", str),
                gpus=_typed(item, "gpus", int),
                enqueued=float(_typed(item, "enqueued", (int, float))),
            )
            spawns.append(
                QueuedSpawn(
                    entry,
                    _typed(item, "server_name", str),
                    _typed(item, "user_options", dict),
                )
            )
        except (TypeError, KeyError) as exc:
            raise QueueFileError(f"queue[{index}]: {exc}") from None
    return spawns


def _typed(item: Any, key: str, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(item, dict) or key not in item:
        raise KeyError(f"missing {key!r}")
    value = item[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"{key!r} has the wrong type ({type(value).__name__})")
    return value


def write(path: str | Path, spawns: Sequence[QueuedSpawn]) -> None:
    """Write the queue atomically: a reader sees the old file or the new one, never a part.

    The text goes to a temporary file in the same folder, is flushed to disk, then renamed over
    ``path``. Blocking (call it from a thread on the hub's event loop).

    Raises
    ------
    OSError
        The folder is missing or not writable; ``path`` is left as it was.
    """
    write_atomic(path, dumps(spawns))


def read(path: str | Path) -> list[QueuedSpawn]:
    """The saved queue; empty when there is no file. Blocking.

    Raises
    ------
    QueueFileError
        The file exists but cannot be parsed (see :func:`loads`).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return loads(text)
