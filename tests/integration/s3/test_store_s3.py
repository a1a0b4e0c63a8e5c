"""The store API on a real S3-compatible server: SeaweedFS on loopback, through s3fs.

Ops' identity puts the real Million Song data set into ``s3://course``; students reach it through
their own view, each with their own keys. fsspec's conformance tests run on a student's home.
"""

from __future__ import annotations

import functools
import io
import secrets
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from fsspec.tests.abstract import (
    AbstractCopyTests,
    AbstractFixtures,
    AbstractOpenTests,
    AbstractPipeTests,
)

from scalelab.store import (
    DATASETS,
    StoreUnavailableError,
    StudentStore,
    check_store,
    fetch_dataset,
    open_store,
    student_store,
)
from tests.support.seaweed import ADMIN, SeaweedS3

#: Students' keys: both may use the shared course bucket; only alice her private bucket.
ALICE = ("alice-key", "alice-secret-0123456789")
BOB = ("bob-key", "bob-secret-0123456789")
IDENTITIES = {
    ALICE[0]: (
        ALICE[1],
        [
            *("Read:course", "Write:course", "List:course"),
            *("Read:alice-private", "Write:alice-private", "List:alice-private"),
        ],
    ),
    BOB[0]: (BOB[1], ["Read:course", "Write:course", "List:course"]),
}


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[SeaweedS3]:
    """A SeaweedFS server with the course store ``s3://course`` holding Million Song."""
    server = SeaweedS3(tmp_path_factory.mktemp("seaweed"), IDENTITIES)
    try:
        server.start()
        ops = open_store("s3://course", server.options(*ADMIN))
        ops.fs.mkdir("course")
        ops.fs.mkdir("alice-private")
        fetch_dataset(DATASETS["millionsong"], ops, mirror=shared_data, log=lambda _line: None)
        yield server
    finally:
        server.stop()


def test_a_student_reads_the_real_data_set_and_writes_the_home(s3: SeaweedS3):
    store = student_store("alice", "s3://course", s3.options(*ALICE))
    with store.open("datasets/millionsong/raw/millionsong.txt", "rb") as f:
        songs = pd.read_csv(f, header=None)
    assert songs.shape == (6724, 13)
    assert songs[0].between(1922, 2011).all()  # the release year comes first
    store.pipe_file("home/alice/lab1/result.csv", b"rmse\n10.3\n")
    assert store.cat_file("home/alice/lab1/result.csv") == b"rmse\n10.3\n"
    assert sorted(store.ls("", detail=False)) == ["datasets", "home"]
    assert store.ls("home", detail=False) == ["home/alice"]


def test_escapes_and_writes_to_datasets_are_refused_on_s3(s3: SeaweedS3):
    bob = student_store("bob", "s3://course", s3.options(*BOB))
    bob.pipe_file("home/bob/private.txt", b"bob's")
    alice = student_store("alice", "s3://course", s3.options(*ALICE))
    for call, args in [
        ("cat_file", ("home/bob/private.txt",)),
        ("cat_file", ("home/alice/../bob/private.txt",)),
        ("ls", ("home/bob",)),
        ("pipe_file", ("home/bob/planted.txt", b"x")),
        ("pipe_file", ("datasets/millionsong/raw/millionsong.txt", b"overwritten")),
        ("rm", ("datasets/millionsong",)),
    ]:
        with pytest.raises(PermissionError):
            getattr(alice, call)(*args)
    # The S3 keys would have allowed all of it: the guard is what refused.
    assert bob.cat_file("home/bob/private.txt") == b"bob's"
    assert not bob.exists("home/bob/planted.txt")
    assert alice.info("datasets/millionsong/raw/millionsong.txt")["size"] == 1248115


def test_one_users_credentials_are_never_handed_to_another(s3: SeaweedS3):
    alices = open_store("s3://alice-private", s3.options(*ALICE))
    alices.pipe_file("notes.txt", b"alice only")
    bobs = open_store("s3://alice-private", s3.options(*BOB))
    assert bobs.fs is not alices.fs
    with pytest.raises(PermissionError):
        bobs.cat_file("notes.txt")
    # Same URL, no keys: an anonymous client, not alice's cached one.
    anonymous = open_store("s3://alice-private", {"endpoint_url": s3.endpoint, "anon": True})
    assert anonymous.fs is not alices.fs
    with pytest.raises(PermissionError):
        anonymous.cat_file("notes.txt")
    assert open_store("s3://alice-private", s3.options(*ALICE)).cat_file("notes.txt") == (
        b"alice only"
    )


def test_a_failed_write_keeps_the_old_object(s3: SeaweedS3):
    store = student_store("alice", "s3://course", s3.options(*ALICE))
    store.pipe_file("home/alice/model.txt", b"the good version")
    with pytest.raises(RuntimeError):
        with store.open("home/alice/model.txt", "wb") as f:
            f.write(b"half of a new")
            raise RuntimeError("interrupted")
    assert store.cat_file("home/alice/model.txt") == b"the good version"


def test_up_front_check_accepts_the_live_endpoint(s3: SeaweedS3):
    check_store("s3://course", s3.options(*ALICE), environ={})


def test_store_disappearing_mid_session(tmp_path: Path):
    """Stop the server during a multipart upload: a clear error, and after a restart on the same
    data no half-written object, the earlier one intact."""
    server = SeaweedS3(tmp_path, IDENTITIES)
    try:
        server.start()
        open_store("s3://course", server.options(*ADMIN)).fs.mkdir("course")
        store = student_store("alice", "s3://course", server.options(*ALICE))
        store.pipe_file("home/alice/kept.txt", b"kept")
        data = secrets.token_bytes(12 * 2**20)
        f = store.open("home/alice/big.bin", "wb", block_size=5 * 2**20)
        f.write(data[: 11 * 2**20])  # two 5 MiB parts go up now
        server.stop()
        with pytest.raises(StoreUnavailableError, match=r"cannot be reached.*endpoint_url"):
            f.write(data[11 * 2**20 :])
            f.close()
        with pytest.raises(StoreUnavailableError, match="store_url"):
            store.ls("home/alice")
        with pytest.raises(StoreUnavailableError, match="nothing answers"):
            check_store("s3://course", server.options(*ALICE), environ={})
        server.start()
        store = student_store("alice", "s3://course", server.options(*ALICE))
        assert store.ls("home/alice", detail=False) == ["home/alice/kept.txt"]
        assert store.cat_file("home/alice/kept.txt") == b"kept"
    finally:
        server.stop()


def _marked_copy(mark: pytest.MarkDecorator):
    """``mark`` for a copy of an inherited test: marking fsspec's own function would mark it in
    every conformance class that inherits it (the local store's too, in whatever module is
    collected after this one)."""

    def apply(test):
        @functools.wraps(test)
        def copy(self, *args, **kwargs):
            return test(self, *args, **kwargs)

        return mark(copy)

    return apply


class TestStudentStoreOnS3Conformance(
    AbstractFixtures, AbstractCopyTests, AbstractOpenTests, AbstractPipeTests
):
    """fsspec.tests.abstract against a student's home on SeaweedFS."""

    protocol = "s3"

    @pytest.fixture
    def fs(self, s3: SeaweedS3) -> StudentStore:
        return student_store("alice", "s3://course", s3.options(*ALICE))

    @pytest.fixture
    def fs_path(self) -> str:
        return f"home/alice/conformance-{secrets.token_hex(3)}"

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return False

    # These fail the same way with plain s3fs against SeaweedFS 4.48 (no conditional PUT for
    # exclusive creation; s3fs's directory copies there): back-end limits, not ScaleLab's.
    # strict: when the back ends fix them, these marks must go.
    _BACKEND = _marked_copy(
        pytest.mark.xfail(strict=True, reason="fails on plain s3fs + SeaweedFS too")
    )
    test_pipe_exclusive = _BACKEND(AbstractPipeTests.test_pipe_exclusive)
    test_open_exclusive = _BACKEND(AbstractOpenTests.test_open_exclusive)
    test_copy_directory_to_existing_directory = _BACKEND(
        AbstractCopyTests.test_copy_directory_to_existing_directory
    )
    test_copy_directory_to_new_directory = _BACKEND(
        AbstractCopyTests.test_copy_directory_to_new_directory
    )
    test_copy_glob_to_existing_directory = _BACKEND(
        AbstractCopyTests.test_copy_glob_to_existing_directory
    )
    test_copy_glob_to_new_directory = _BACKEND(AbstractCopyTests.test_copy_glob_to_new_directory)
    test_copy_directory_without_files_with_same_name_prefix = _BACKEND(
        AbstractCopyTests.test_copy_directory_without_files_with_same_name_prefix
    )


def test_pandas_writes_parquet_through_the_store_file(s3: SeaweedS3):
    store = student_store("alice", "s3://course", s3.options(*ALICE))
    frame = pd.DataFrame({"year": [2001, 1999], "f1": [0.5, -1.0]})
    with store.open("home/alice/small.parquet", "wb") as f:
        frame.to_parquet(f)
    back = pd.read_parquet(io.BytesIO(store.cat_file("home/alice/small.parquet")))
    assert back.equals(frame)
