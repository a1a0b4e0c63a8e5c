"""scalelab.common.diskspace: a full disk recognised, and told with its mount and sizes."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from scalelab.common.diskspace import (
    format_bytes,
    full_disk_message,
    is_disk_full,
    mount_point,
)


@contextlib.contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` (mount's ``size=`` option, e.g. ``"256k"``) mounted at ``mount``
    (created), unmounted after; the test is skipped where mounting is not allowed (not root)."""
    mount.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill the disk holding ``folder`` with a file, then free ``leave`` bytes of it."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_or_quota_is_recognised(code: int):
    assert is_disk_full(OSError(code, os.strerror(code)))


def test_other_errors_are_not_a_full_disk():
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(ValueError("No space left on device"))  # the text alone is not it
    assert not is_disk_full(sqlite3.OperationalError("database is locked"))
    assert not is_disk_full(None)


def test_a_full_disk_is_found_in_the_cause_and_context_chain():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise RuntimeError("upload failed") from exc
    except RuntimeError as wrapped:
        assert is_disk_full(wrapped)
    try:
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        except OSError:
            raise KeyError("x")  # noqa: B904 -- implicit __context__ on purpose
    except KeyError as implicit:
        assert is_disk_full(implicit)


def test_sqlite_full_database_is_a_full_disk():
    assert is_disk_full(sqlite3.OperationalError("database or disk is full"))


def test_sizes_read_as_people_write_them():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1025) == "2 KiB"
    assert format_bytes(1_248_115) == "1.2 MiB"
    assert format_bytes(1024**2 + 1) == "1.1 MiB"
    assert format_bytes(12 * 1024**2) == "12 MiB"
    assert format_bytes(12 * 1024**2 + 1) == "13 MiB"
    assert format_bytes(2 * 1024**3) == "2.0 GiB"


def test_the_mount_point_of_a_missing_path_is_its_nearest_parents():
    assert mount_point("/") == "/"
    assert mount_point("/proc/no/such/file") == "/proc"


def test_the_message_names_the_disk_its_sizes_and_the_fix_on_a_real_tmpfs(tmp_path: Path):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        fill(disk, leave=300 * 1024)
        target = disk / "course" / "datasets" / "millionsong"
        message = full_disk_message(target, needed_bytes=5 * 1024**2)
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    assert "\n" not in message
    assert message.startswith(f"The disk holding {target} (mount {disk}, ")
    assert f"{format_bytes(free)} free of 1.0 MiB" in message
    assert f"needs {format_bytes(5 * 1024**2 - free)} more (5.0 MiB in all)" in message
    assert "Free space there, or ask the operators" in message


def test_without_a_known_size_the_message_says_no_room_left(tmp_path: Path):
    with tmpfs(tmp_path / "disk", "256k") as disk:
        fill(disk)
        message = full_disk_message(disk / "notebook.ipynb")
    assert f"(mount {disk}, 0 B free of 256 KiB) is full: no room left." in message
