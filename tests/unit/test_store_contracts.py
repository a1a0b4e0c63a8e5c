"""fsspec's and jupyter's contents contracts on a local course store (issue 12).

A rewrite keeps the file's mode, a write through a link in the home writes its target, an
unclosed write leaves nothing in the listings, ``created`` is never after ``last_modified``, and
``open_store()`` treats a trailing ``/`` as fsspec's own local file system does. Each is checked
through the student's store and, where the drive has its own path, through the drive's contents
manager (jupyter-fs' ``FSSpecManager`` on ``scalelab:///``, as the single-user server makes it).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.local import LocalFileSystem
from fsspec.tests.abstract import (
    AbstractCopyTests,
    AbstractFixtures,
    AbstractGetTests,
    AbstractPutTests,
)

from scalelab.common.atomicfile import is_part_name, part_path, write_atomic
from scalelab.store import (
    StoreAccessError,
    StoreFileSystem,
    StudentStore,
    open_store,
    student_store,
)

with warnings.catch_warnings():
    # jupyter-fs 1.2.1's config module passes traitlets metadata the pre-4.1 way (upstream).
    warnings.simplefilter("ignore", DeprecationWarning)
    from jupyterfs.manager.fsspec import FSSpecManager


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    """A local course store with alice's home and a data set."""
    root = tmp_path / "course"
    for folder in ("home/alice", "datasets/songs"):
        (root / folder).mkdir(parents=True)
    (root / "datasets/songs/part-0.csv").write_text("year\n2001\n")
    return root


@pytest.fixture
def home(store_root: Path) -> Path:
    return store_root / "home/alice"


@pytest.fixture
def alice(store_root: Path) -> StudentStore:
    return student_store("alice", store_root.as_uri())


@pytest.fixture
def drive(store_root: Path, monkeypatch: pytest.MonkeyPatch) -> FSSpecManager:
    """The drive's contents manager, from the environment the spawner gives alice's server."""
    monkeypatch.setenv("SCALELAB_STORE_URL", store_root.as_uri())
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    return FSSpecManager("scalelab:///")


def _save_text(drive: FSSpecManager, path: str, text: str) -> dict[str, Any]:
    """Save ``text`` through the drive, as the contents API's PUT does."""
    with warnings.catch_warnings():
        # jupyter-fs 1.2.1 calls jupyter_server's deprecated save hooks (upstream).
        warnings.filterwarnings("ignore", "run_(pre|post)_save_hook", DeprecationWarning)
        return drive.save({"type": "file", "format": "text", "content": text}, path)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def _write_with_open(store: StudentStore, path: str, text: str) -> None:
    with store.open(path, "w") as f:
        f.write(text)


#: Ways a student writes ``home/alice/<name>`` with ``text``: the store's calls and the drive's.
WRITERS: dict[str, Callable[[StudentStore, FSSpecManager, str, str], Any]] = {
    "pipe_file": lambda s, d, name, text: s.pipe_file(f"home/alice/{name}", text.encode()),
    "open": lambda s, d, name, text: _write_with_open(s, f"home/alice/{name}", text),
    "write_text": lambda s, d, name, text: s.write_text(f"home/alice/{name}", text),
    "drive": lambda s, d, name, text: _save_text(d, f"home/alice/{name}", text),
}


# -- 1. a rewrite keeps the mode ------------------------------------------------------------------


@pytest.mark.parametrize("how", sorted(WRITERS))
def test_a_rewrite_keeps_the_mode_and_a_new_file_gets_the_umask(
    how: str, alice: StudentStore, drive: FSSpecManager, home: Path
):
    private = home / "private.txt"
    private.write_text("old")
    private.chmod(0o600)
    WRITERS[how](alice, drive, "private.txt", "new")
    assert private.read_text() == "new"
    assert _mode(private) == 0o600
    umask = os.umask(0o022)
    os.umask(umask)
    WRITERS[how](alice, drive, "fresh.txt", "first")
    assert _mode(home / "fresh.txt") == 0o666 & ~umask


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may give a file to another owner")
def test_a_rewrite_by_root_keeps_the_owner_and_group(alice: StudentStore, home: Path):
    owned = home / "owned.txt"
    owned.write_text("old")
    os.chown(owned, 4321, 4322)
    owned.chmod(0o640)
    alice.pipe_file("home/alice/owned.txt", b"new")
    st = owned.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (4321, 4322, 0o640)


def test_write_atomic_keeps_a_rewritten_files_mode(tmp_path: Path):
    target = tmp_path / "config.json"
    write_atomic(target, "{}")
    assert _mode(target) == 0o600  # a new file: private, as the hub's files are
    target.chmod(0o644)
    write_atomic(target, '{"a": 1}')
    assert _mode(target) == 0o644 and target.read_text() == '{"a": 1}'


# -- 2. a write through a link writes its target -----------------------------------------------


@pytest.mark.parametrize("how", sorted(WRITERS))
def test_a_write_through_a_link_in_the_home_writes_its_target(
    how: str, alice: StudentStore, drive: FSSpecManager, home: Path
):
    (home / "work").mkdir()
    (home / "work/real.txt").write_text("old")
    (home / "link.txt").symlink_to("work/real.txt")
    WRITERS[how](alice, drive, "link.txt", "new")
    assert (home / "link.txt").is_symlink()
    assert (home / "work/real.txt").read_text() == "new"
    assert sorted(os.listdir(home)) == ["link.txt", "work"]  # nothing beside the link either


def test_a_write_through_a_link_leaving_the_home_is_refused_and_keeps_the_link(
    alice: StudentStore, store_root: Path, home: Path, tmp_path: Path
):
    outside = tmp_path / "outside.txt"
    outside.write_text("not the student's")
    (home / "out.txt").symlink_to(outside)
    (home / "data.csv").symlink_to(store_root / "datasets/songs/part-0.csv")
    (home / "dangling.txt").symlink_to(tmp_path / "nothing-yet.txt")
    for name, message in [("out.txt", "leaves the course store"), ("data.csv", "read-only")]:
        with pytest.raises(StoreAccessError, match=message):
            alice.pipe_file(f"home/alice/{name}", b"x")
        assert (home / name).is_symlink()
    with pytest.raises(StoreAccessError, match="leaves the course store"):
        alice.write_text("home/alice/dangling.txt", "x")
    assert outside.read_text() == "not the student's"
    assert not (tmp_path / "nothing-yet.txt").exists()
    assert (store_root / "datasets/songs/part-0.csv").read_text() == "year\n2001\n"


# -- 3. an unclosed write leaves nothing in the listings -------------------------------------------


def test_a_write_dropped_without_close_leaves_no_part_file(alice: StudentStore, home: Path):
    (home / "kept.txt").write_text("old")
    f = alice.open("home/alice/kept.txt", "wb")
    f.write(b"half")
    assert [p.name for p in home.iterdir() if is_part_name(p.name)]  # the write's part file
    del f
    gc.collect()
    assert sorted(os.listdir(home)) == ["kept.txt"]
    assert (home / "kept.txt").read_text() == "old"


#: Names like ScaleLab's part files that are the student's own, and must stay listed.
LOOKALIKES = [
    ".notes.scalelab-xyz.part",  # not 8 hex digits
    ".notes.scalelab-0123456G.part",  # not lowercase hex
    "notes.scalelab-01234567.part",  # no leading dot
    ".notes.scalelab-01234567.part.bak",
    ".notes.01234567.part",
    ".notes.part",
]


def test_part_names_are_scalelabs_exact_pattern_only(tmp_path: Path):
    made = part_path(tmp_path / "notes.ipynb")
    assert made.parent == tmp_path and is_part_name(made.name)
    assert made.name.startswith(".notes.ipynb.scalelab-")
    assert [name for name in LOOKALIKES if is_part_name(name)] == []


def test_part_files_left_by_a_killed_writer_are_not_listed(
    alice: StudentStore, drive: FSSpecManager, home: Path, store_root: Path
):
    (home / "sub").mkdir()
    (home / "sub/kept.txt").write_text("kept")
    for name in LOOKALIKES:
        (home / "sub" / name).write_text("the student's")
    # A writer that dies with its file open (no finalizer, no close) leaves its part file.
    killed = (
        "import os\n"
        "from scalelab.store import student_store\n"
        f"f = student_store('alice', {store_root.as_uri()!r}).open('home/alice/sub/x.txt', 'wb')\n"
        "f.write(b'half'); f.flush(); os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", killed], check=True, timeout=120)
    left = [name for name in os.listdir(home / "sub") if is_part_name(name)]
    assert len(left) == 1 and left[0].startswith(".x.txt.scalelab-")
    shown = sorted(["kept.txt", *LOOKALIKES])
    assert sorted(e.rsplit("/", 1)[1] for e in alice.ls("home/alice/sub", detail=False)) == shown
    found = alice.find("home/alice", withdirs=True)
    assert sorted(p.rsplit("/", 1)[1] for p in found if p.startswith("home/alice/sub/")) == shown
    walked = {name for _, _, files in alice.walk("home/alice") for name in files}
    assert sorted(walked) == shown
    globbed = alice.glob("home/alice/sub/.*")
    assert sorted(p.rsplit("/", 1)[1] for p in globbed) == sorted(n for n in shown if n[0] == ".")
    drive.allow_hidden = True  # the student's own hidden files are shown, ScaleLab's never
    listed = drive.get("home/alice/sub", content=True)["content"]
    assert sorted(e["name"] for e in listed) == shown


# -- 4. created is never later than last_modified ----------------------------------------------


def _write_slowly(store: StudentStore, path: str) -> None:
    """A write whose content reaches the disk a while before the rename that publishes it."""
    with store.open(path, "wb") as f:
        f.write(b"content")
        f.flush()
        time.sleep(0.05)


def test_created_is_never_later_than_modified_in_info_and_listings(alice: StudentStore):
    _write_slowly(alice, "home/alice/new.txt")
    info = alice.info("home/alice/new.txt")
    assert info["created"] <= info["mtime"]
    (entry,) = [e for e in alice.ls("home/alice") if e["name"] == "home/alice/new.txt"]
    assert entry["created"] <= entry["mtime"]
    assert alice.created("home/alice/new.txt") <= alice.modified("home/alice/new.txt")


def test_the_drives_model_is_never_created_after_last_modified(
    alice: StudentStore, drive: FSSpecManager
):
    _write_slowly(alice, "home/alice/new.txt")
    model = drive.get("home/alice/new.txt", content=False)
    assert datetime.fromisoformat(model["created"]) <= datetime.fromisoformat(
        model["last_modified"]
    )
    saved = _save_text(drive, "home/alice/saved.txt", "x")
    assert saved["created"] <= saved["last_modified"]  # same format, so ISO strings compare
    for entry in drive.get("home/alice", content=True)["content"]:
        assert entry["created"] <= entry["last_modified"], entry["name"]


# -- 5. open_store keeps trailing slashes, as fsspec's LocalFileSystem does ------------------------


def _copies(fs: Any, at: Callable[[str], str], local: Path) -> None:
    """The same calls on any file system; ``at`` makes a path of it, ``local`` is a local folder
    to get into and put from."""
    fs.pipe_file(at("a.txt"), b"a")
    fs.pipe_file(at("dir/b.txt"), b"b")
    fs.pipe_file(at("dir/sub/c.txt"), b"c")
    fs.cp(at("a.txt"), at("newdir/"))
    fs.cp(at("dir/"), at("copied/"), recursive=True)
    fs.get(at("dir/"), str(local / "got") + "/", recursive=True)
    fs.get(at("a.txt"), str(local / "gotdir") + "/")
    (local / "src/inner").mkdir(parents=True)
    (local / "src/inner/d.txt").write_text("d")
    fs.put(str(local / "src") + "/", at("putdir/"), recursive=True)
    fs.put(str(local / "src/inner/d.txt"), at("putfile/"))


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) + ("/" if p.is_dir() else "") for p in root.rglob("*"))


def test_open_store_treats_a_trailing_slash_as_the_local_file_system_does(tmp_path: Path):
    reference, store = tmp_path / "reference", tmp_path / "store"
    reference.mkdir()
    (tmp_path / "ref-local").mkdir()
    (tmp_path / "store-local").mkdir()
    _copies(LocalFileSystem(auto_mkdir=True), lambda p: f"{reference}/{p}", tmp_path / "ref-local")
    _copies(open_store(store.as_uri()), lambda p: p, tmp_path / "store-local")
    assert "newdir/a.txt" in _tree(reference)  # the reference does what the test expects
    assert _tree(store) == _tree(reference)
    assert _tree(tmp_path / "store-local") == _tree(tmp_path / "ref-local")


class TestOpenStoreConformance(
    AbstractFixtures, AbstractCopyTests, AbstractGetTests, AbstractPutTests
):
    """fsspec.tests.abstract's copy, get and put cases (trailing ``/`` among them) on
    ``open_store``, as they pass on fsspec's own local file system."""

    @pytest.fixture
    def fs(self, tmp_path: Path) -> StoreFileSystem:
        return open_store((tmp_path / "course").as_uri())

    @pytest.fixture
    def fs_path(self) -> str:
        return "conformance"

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return True
