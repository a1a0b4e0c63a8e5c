"""Files written whole or not at all: a temporary file beside the target, then ``os.replace``.

Every ScaleLab file that another process reads while it may be rewritten goes through here.
Temporary files are named ``.<name>.scalelab-<8 hex digits>.part`` (:func:`part_path`,
:func:`is_part_name`); a rewrite keeps the mode (and, run as root, owner and group) it replaces.
Why: docs/design-notes.md, scalelab.common.atomicfile.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

#: The names :func:`part_path` gives: ``.<name>.scalelab-<8 lowercase hex digits>.part``.
PART_NAME = re.compile(r"\..+\.scalelab-[0-9a-f]{8}\.part")


def part_path(target: str | Path) -> Path:
    """A new temporary path beside ``target``: ``.<name>.scalelab-<8 hex digits>.part`` (pure,
    not created)."""
    target = Path(target)
    return target.with_name(f".{target.name}.scalelab-{secrets.token_hex(4)}.part")


def is_part_name(name: str) -> bool:
    """Whether the file name ``name`` (no folder) is one of :func:`part_path`'s (pure)."""
    return PART_NAME.fullmatch(name) is not None


def publish(part: str | Path, target: str | Path) -> None:
    """Rename ``part`` over ``target`` (``os.replace``), keeping an existing ``target``'s mode.

    When ``target`` is a regular file, ``part`` first gets its permission bits and, where the
    process may set them (run as root), its owner and group; otherwise ``part`` keeps its own
    (a new file). A link at ``target`` is replaced, not followed: a caller that writes through
    links resolves them first.

    Raises
    ------
    OSError
        The rename (or the chmod) failed; ``part`` is left for the caller to remove.
    """
    try:
        old = os.stat(target, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None and stat.S_ISREG(old.st_mode):
        new = os.stat(part)
        if (new.st_uid, new.st_gid) != (old.st_uid, old.st_gid):
            with contextlib.suppress(PermissionError):  # not root: the part stays the writer's
                os.chown(part, old.st_uid, old.st_gid)
        os.chmod(part, stat.S_IMODE(old.st_mode))  # after chown, which clears set-id bits
    os.replace(part, target)


def stage_file(target: str | Path, content: bytes | str) -> Path:
    """Write ``content`` (flushed and fsynced) to a hidden :func:`part_path` file beside
    ``target`` (mode 0600), to be renamed over it later (:func:`publish`).

    Parameters
    ----------
    target
        The file the content is meant for; its folder must exist.
    content
        Bytes, or text written as UTF-8.

    Returns
    -------
    pathlib.Path
        The temporary file; the caller renames it (:func:`publish`) or removes it.

    Raises
    ------
    OSError
        The folder is missing or not writable, or the disk is full; nothing is left behind.
    """
    target = Path(target)
    data = content.encode() if isinstance(content, str) else content
    tmp = part_path(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def write_atomic(target: str | Path, content: bytes | str) -> None:
    """Replace ``target`` with ``content`` atomically (bytes, or text as UTF-8).

    A rewrite keeps the old file's mode (:func:`publish`); a new file is 0600.

    Raises
    ------
    OSError
        As :func:`stage_file`, or the rename failed; ``target`` is left as it was and the
        temporary file is removed.
    """
    tmp = stage_file(target, content)
    try:
        publish(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def replacing(target: str | Path) -> Iterator[Path]:
    """A temporary path beside ``target`` for a writer that needs a path (a download); renamed
    over ``target`` (:func:`publish`) when the block ends without an exception, removed when it
    raises.

    Yields
    ------
    pathlib.Path
        A hidden :func:`part_path` path in ``target``'s folder (not created).
    """
    part = part_path(target)
    try:
        yield part
        publish(part, target)
    finally:
        part.unlink(missing_ok=True)
