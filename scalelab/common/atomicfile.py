"""Files written whole or not at all: a temporary file beside the target, then ``os.replace``.

A reader (or a crash) sees the old file or the new one, never half of it, because a rename
within one folder is atomic on POSIX file systems. Every ScaleLab file that another process
reads while it may be rewritten goes through here: the saved GPU queue, notices, released and
delivered labs, sparkmagic's configuration, the store's local cache.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def stage_file(target: str | Path, content: bytes | str) -> Path:
    """Write ``content`` (flushed and fsynced) to a hidden ``.<name>.*.part`` file beside
    ``target``, to be renamed over it later.

    Parameters
    ----------
    target
        The file the content is meant for; its folder must exist.
    content
        Bytes, or text written as UTF-8.

    Returns
    -------
    pathlib.Path
        The temporary file; the caller renames it (``os.replace``) or removes it.

    Raises
    ------
    OSError
        The folder is missing or not writable, or the disk is full; nothing is left behind.
    """
    target = Path(target)
    data = content.encode() if isinstance(content, str) else content
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return Path(tmp)


def write_atomic(target: str | Path, content: bytes | str) -> None:
    """Replace ``target`` with ``content`` atomically (bytes, or text as UTF-8).

    Raises
    ------
    OSError
        As :func:`stage_file`, or the rename failed; ``target`` is left as it was and the
        temporary file is removed.
    """
    tmp = stage_file(target, content)
    try:
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def replacing(target: str | Path) -> Iterator[Path]:
    """A temporary path beside ``target`` for a writer that needs a path (a download); renamed
    over ``target`` when the block ends without an exception, removed when it raises.

    Yields
    ------
    pathlib.Path
        A hidden ``.<name>.<pid>.part`` path in ``target``'s folder (not created).
    """
    target = Path(target)
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        yield part
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)
