"""The student's store API on the local default store: the guard, atomic writes, clear errors.

Also fsspec's own conformance tests (``fsspec.tests.abstract``) run against the student's view.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import fsspec
import pytest
from fsspec.tests.abstract import (
    AbstractCopyTests,
    AbstractFixtures,
    AbstractGetTests,
    AbstractOpenTests,
    AbstractPipeTests,
    AbstractPutTests,
)

from scalelab.common.ports import free_port
from scalelab.store import (
    StoreAccessError,
    StoreConfigError,
    StoreUnavailableError,
    StudentStore,
    check_store,
    open_store,
    student_store,
)
from scalelab.store.access.guard import StoreView, split_path, validate_user
from scalelab.store.access.session import UnavailableStore, kernel_store
from scalelab.store.access.student import is_unreachable
from scalelab.store.protocols import for_url


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    """A local course store with two homes, a data set and a folder for ops only."""
    root = tmp_path / "course"
    for folder in ("home/alice", "home/bob", "datasets/songs", "ops"):
        (root / folder).mkdir(parents=True)
    (root / "home/bob/secret.txt").write_text("bob's")
    (root / "datasets/songs/part-0.csv").write_text("year,f1\n2001,0.5\n")
    (root / "ops/credentials").write_text("root's")
    return root


@pytest.fixture
def alice(store_root: Path) -> StudentStore:
    return student_store("alice", store_root.as_uri())


# -- the guard (pure) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "write", "allowed"),
    [
        ("", False, True),
        ("home", False, True),
        ("datasets", False, True),
        ("home/alice/a/b.txt", True, True),
        ("./home//alice/x", True, True),
        ("datasets/songs/part-0.csv", False, True),
        ("datasets/songs/new.csv", True, False),
        ("home/bob/secret.txt", False, False),
        ("home/alicex/file", False, False),
        ("ops/credentials", False, False),
        ("home", True, False),
        ("", True, False),
    ],
)
def test_guard_allows_the_home_and_reading_datasets_only(path: str, write: bool, allowed: bool):
    view = StoreView("alice")
    if allowed:
        assert view.check(path, write=write) == "/".join(split_path(path))
    else:
        with pytest.raises(StoreAccessError, match="home/alice"):
            view.check(path, write=write)


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "../course2", "home/alice/../bob/secret.txt", "file:///etc", "home/alice/\0"],
)
def test_guard_refuses_absolute_paths_urls_and_dot_dot(path: str):
    with pytest.raises(StoreAccessError, match="store"):
        StoreView("alice").check(path)


@pytest.mark.parametrize("user", ["", ".", "..", "a/b", "a\\b"])
def test_user_names_that_would_name_another_folder_are_refused(user: str):
    with pytest.raises(StoreConfigError, match="JUPYTERHUB_USER"):
        validate_user(user)


def test_symlink_targets_are_checked_against_the_allowed_roots():
    view = StoreView("alice")
    view.check_target("/srv/course", "/srv/course/datasets/x", "home/alice/link")
    for target in ("/etc", "/srv/course/home/bob", "/srv/course/ops/credentials", "/srv"):
        with pytest.raises(StoreAccessError, match="link"):
            view.check_target("/srv/course", target, "home/alice/link")


# -- the student's view on a real local store ----------------------------------------------------


def test_listings_show_only_the_home_and_the_datasets(alice: StudentStore):
    assert sorted(alice.ls("", detail=False)) == ["datasets", "home"]
    assert alice.ls("home", detail=False) == ["home/alice"]
    alice.pipe_file("home/alice/notes.txt", b"mine")
    found = alice.find("")
    assert "home/alice/notes.txt" in found and "datasets/songs/part-0.csv" in found
    assert not [p for p in found if p.startswith(("home/bob", "ops"))]
    walked = [root for root, _dirs, _files in alice.walk("")]
    assert "home/bob" not in walked and "ops" not in walked
    assert alice.glob("home/*") == ["home/alice"]


def test_home_is_read_write_and_datasets_read_only(alice: StudentStore, store_root: Path):
    alice.pipe_file("home/alice/results/run1.txt", b"0.91")
    assert (store_root / "home/alice/results/run1.txt").read_bytes() == b"0.91"
    assert alice.cat_file("datasets/songs/part-0.csv").startswith(b"year")
    with pytest.raises(PermissionError, match="read-only"):
        alice.pipe_file("datasets/songs/part-0.csv", b"overwritten")
    with pytest.raises(PermissionError, match="read-only"):
        alice.rm("datasets/songs", recursive=True)
    with pytest.raises(PermissionError, match="read-only"):
        alice.open("datasets/songs/part-0.csv", "ab")
    assert (store_root / "datasets/songs/part-0.csv").read_text().startswith("year")


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("cat_file", ("home/bob/secret.txt",)),
        ("cat_file", ("../course/home/bob/secret.txt",)),
        ("cat_file", ("/etc/hostname",)),
        ("open", ("ops/credentials",)),
        ("ls", ("home/bob",)),
        ("ls", ("..",)),
        ("info", ("ops",)),
        ("get_file", ("ops/credentials", "stolen-copy")),
        ("cp_file", ("home/bob/secret.txt", "home/alice/copy.txt")),
        ("cp_file", ("home/alice/x", "home/bob/planted.txt")),
        ("mv", ("home/bob/secret.txt", "home/alice/taken.txt")),
        ("rm", ("home/bob",)),
        ("pipe_file", ("home/bob/planted.txt", b"x")),
        ("find", ("../",)),
    ],
)
def test_escapes_through_the_api_are_refused(
    alice: StudentStore, store_root: Path, call: str, args: tuple
):
    with pytest.raises(PermissionError):
        getattr(alice, call)(*args)
    assert (store_root / "home/bob/secret.txt").read_text() == "bob's"
    assert not (store_root / "home/bob/planted.txt").exists()


def test_existence_checks_say_false_outside_the_allowed_roots(alice: StudentStore):
    assert alice.exists("datasets/songs/part-0.csv") and alice.isdir("home/alice")
    assert not alice.exists("home/bob/secret.txt")
    assert not alice.isdir("home/bob") and not alice.isfile("ops/credentials")
    assert not alice.exists("../course/ops/credentials") and not alice.isfile("/etc/hostname")


def test_symlinks_leaving_the_allowed_roots_are_refused(alice: StudentStore, store_root: Path):
    home = store_root / "home/alice"
    (home / "to-bob").symlink_to(store_root / "home/bob")
    (home / "to-etc").symlink_to("/etc")
    (home / "to-ops.txt").symlink_to(store_root / "ops/credentials")
    (home / "to-data").symlink_to(store_root / "datasets/songs")
    for path in ("home/alice/to-bob/secret.txt", "home/alice/to-etc/hostname"):
        with pytest.raises(PermissionError, match="link"):
            alice.cat_file(path)
    with pytest.raises(PermissionError, match="link"):
        alice.open("home/alice/to-ops.txt")
    with pytest.raises(PermissionError, match="link"):
        alice.pipe_file("home/alice/to-bob/planted.txt", b"x")
    assert not (store_root / "home/bob/planted.txt").exists()
    assert alice.cat_file("home/alice/to-data/part-0.csv").startswith(b"year")  # inside: fine
    assert alice.ls("home/alice", detail=False) == ["home/alice/to-data"]  # escaping links hidden


def test_an_existing_file_survives_a_write_that_fails(alice: StudentStore, store_root: Path):
    target = store_root / "home/alice/model.txt"
    target.write_text("the good version")

    class Interrupted(Exception):
        pass

    with pytest.raises(Interrupted):
        with alice.open("home/alice/model.txt", "w") as f:
            f.write("half of a new ver")
            raise Interrupted
    assert target.read_text() == "the good version"
    assert sorted(os.listdir(target.parent)) == ["model.txt"]  # no temporary file left
    with alice.open("home/alice/model.txt", "w") as f:
        f.write("the new version")
    assert target.read_text() == "the new version"
    with pytest.raises(FileExistsError):
        alice.pipe_file("home/alice/model.txt", b"x", mode="create")
    with alice.open("scalelab:///home/alice/model.txt", "wb") as f:  # the URL form too
        f.write(b"v3")
    assert target.read_bytes() == b"v3"


def test_store_disappearing_mid_write_is_a_clear_error_and_leaves_nothing(
    alice: StudentStore, store_root: Path, tmp_path: Path
):
    f = alice.open("home/alice/big.bin", "wb")
    f.write(b"x" * 100_000)
    shutil.move(store_root, tmp_path / "unmounted")  # the store goes away while the file is open
    with pytest.raises(StoreUnavailableError, match=r"cannot be reached.*store_url"):
        f.close()
    assert not (tmp_path / "unmounted/home/alice/big.bin").exists()
    # At most the hidden temporary file, which moved away with the store's folder.
    left = [p.name for p in (tmp_path / "unmounted/home/alice").iterdir()]
    assert all(name.startswith(".big.bin.scalelab-") and name.endswith(".part") for name in left)
    with pytest.raises(StoreUnavailableError, match="its folder is gone"):
        alice.ls("home/alice")


def test_each_student_store_is_a_new_instance(store_root: Path):
    a = student_store("alice", store_root.as_uri())
    b = student_store("bob", store_root.as_uri())
    assert a is not b and a.fs is not b.fs
    assert b.cat_file("home/bob/secret.txt") == b"bob's"
    with pytest.raises(PermissionError):
        a.cat_file("home/bob/secret.txt")


def test_open_store_in_a_students_server_is_their_guarded_view(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
):
    """No call in a student's notebook hands out more than ``store``: ``open_store()`` there is
    the student's view; only an explicit URL (ops' tools) opens the whole store."""
    monkeypatch.setenv("SCALELAB_STORE_URL", store_root.as_uri())
    monkeypatch.setenv("SCALELAB_STORE_OPTIONS", "{}")
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    guarded = open_store()
    assert isinstance(guarded, StudentStore)
    guarded.pipe_file("home/alice/mine.txt", b"alice's")
    for write in (
        lambda: guarded.pipe_file("datasets/songs/planted.csv", b"x"),
        lambda: guarded.rm("datasets/songs/part-0.csv"),
        lambda: guarded.cat_file("home/bob/secret.txt"),
    ):
        with pytest.raises(StoreAccessError):
            write()
    assert not (store_root / "datasets/songs/planted.csv").exists()
    assert (store_root / "datasets/songs/part-0.csv").exists()
    whole = open_store(store_root.as_uri())
    assert not isinstance(whole, StudentStore)
    assert whole.cat_file("ops/credentials") == b"root's"
    monkeypatch.delenv("JUPYTERHUB_USER")
    assert open_store().cat_file("ops/credentials") == b"root's"  # a laptop, ops: the whole store


def test_the_drive_protocol_reads_user_and_store_from_the_environment(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
):
    from scalelab.store.access.student import register_protocol

    register_protocol()
    monkeypatch.setenv("SCALELAB_STORE_URL", store_root.as_uri())
    monkeypatch.setenv("JUPYTERHUB_USER", "bob")
    fs, root = fsspec.core.url_to_fs("scalelab:///", skip_instance_cache=True)
    assert isinstance(fs, StudentStore) and root == "/"  # the drive's root; paths have no "/"
    assert fs.cat_file("home/bob/secret.txt") == b"bob's"
    with pytest.raises(PermissionError):
        fs.ls("home/alice")


def test_libraries_read_scalelab_urls_through_the_students_view(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
):
    import pandas as pd

    monkeypatch.setenv("SCALELAB_STORE_URL", store_root.as_uri())
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    songs = pd.read_csv("scalelab:///datasets/songs/part-0.csv")
    assert songs.to_dict("list") == {"year": [2001], "f1": [0.5]}
    songs.to_parquet("scalelab:///home/alice/songs.parquet")
    assert (store_root / "home/alice/songs.parquet").stat().st_size > 0
    with pytest.raises(PermissionError):
        pd.read_csv("scalelab:///ops/credentials")
    monkeypatch.setenv("JUPYTERHUB_USER", "bob")  # same process, same URL: bob's own view
    assert pd.read_csv("scalelab:///home/bob/secret.txt", header=None).shape == (1, 1)
    with pytest.raises(PermissionError):
        pd.read_parquet("scalelab:///home/alice/songs.parquet")
    other = {"user": "bob", "store_url": store_root.as_uri()}
    assert pd.read_csv("scalelab:///home/bob/secret.txt", storage_options=other, header=None).shape


# -- bad configuration: checked up front, readable at first use ----------------------------------


@pytest.mark.parametrize(
    ("url", "options", "error", "message"),
    [
        ("nosuchproto://x/course", {}, StoreConfigError, "protocol 'nosuchproto'.*store_url"),
        ("gcs://bucket/course", {}, StoreConfigError, "needs gcsfs.*pip install gcsfs"),
        ("hdfs:///course", {}, StoreConfigError, "names no namenode.*store_url"),
        ("hdfs://127.0.0.1:{port}/course", {}, StoreUnavailableError, "namenode.*store_url"),
        ("webhdfs://127.0.0.1:{port}/course", {}, StoreUnavailableError, "nothing answers"),
        (
            "s3://bucket/course",
            {"endpoint_url": "http://127.0.0.1:{port}"},
            StoreUnavailableError,
            "endpoint_url in store_options",
        ),
    ],
)
def test_bad_store_configuration_is_found_up_front(url, options, error, message):
    port = free_port()
    url = url.format(port=port)
    options = {k: v.format(port=port) for k, v in options.items()}
    with pytest.raises(error, match=message):
        check_store(url, options, environ={})


def test_a_kernel_gets_a_store_that_explains_the_problem_at_first_use():
    namespace: dict = {}
    env = {"SCALELAB_STORE_URL": f"hdfs://127.0.0.1:{free_port()}/course"}
    banner = kernel_store(namespace, env)
    assert banner.startswith("course store unavailable:") and "store_url" in banner
    store = namespace["store"]
    assert isinstance(store, UnavailableStore) and "unavailable" in repr(store)
    with pytest.raises(StoreUnavailableError, match="store_url"):
        store.open("datasets/x")
    assert not hasattr(store, "_repr_html_")  # IPython's display probes do not raise


def test_a_kernel_under_the_hub_gets_the_students_view(store_root: Path):
    namespace: dict = {}
    env = {"SCALELAB_STORE_URL": store_root.as_uri(), "JUPYTERHUB_USER": "alice"}
    assert "home/alice and datasets/" in kernel_store(namespace, env)
    assert isinstance(namespace["store"], StudentStore)
    assert namespace["STORE_URL"] == store_root.as_uri()
    namespace = {}
    kernel_store(namespace, {"SCALELAB_STORE_URL": store_root.as_uri()})
    assert namespace["store"].cat_file("ops/credentials") == b"root's"  # no user: whole store


def test_unreachable_errors_are_recognised_through_their_causes():
    try:
        try:
            raise ConnectionRefusedError(111, "refused")
        except OSError as inner:
            raise RuntimeError("client failed") from inner
    except RuntimeError as exc:
        assert is_unreachable(exc)
    assert not is_unreachable(FileNotFoundError("x"))
    assert "endpoint_url" in for_url("s3://b/c").setting_hint
    assert "namenode" in for_url("hdfs://n/c").setting_hint


def test_open_store_never_hands_back_a_cached_instance(store_root: Path):
    assert open_store(store_root.as_uri()).fs is not open_store(store_root.as_uri()).fs


# -- fsspec's conformance tests on the student's home --------------------------------------------


class TestStudentStoreConformance(
    AbstractFixtures,
    AbstractCopyTests,
    AbstractGetTests,
    AbstractPutTests,
    AbstractOpenTests,
    AbstractPipeTests,
):
    """fsspec.tests.abstract against ``student_store`` at ``home/alice/conformance``."""

    protocol = "file"

    @pytest.fixture
    def fs(self, tmp_path: Path) -> StudentStore:
        return student_store("alice", (tmp_path / "course").as_uri())

    @pytest.fixture
    def fs_path(self) -> str:
        return "home/alice/conformance"

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return True
