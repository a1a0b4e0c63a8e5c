"""The kinds of course store (``scalelab.store.protocols``): which protocol serves a URL or an
open file system, what each declares, that a new protocol is one class and one registration,
and that every registered protocol runs fsspec's own conformance tests somewhere in the suite."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from scalelab.store import (
    StoreConfigError,
    StoreUnavailableError,
    check_store,
    protocols,
    student_store,
)
from scalelab.store.access.fs import open_store
from scalelab.store.datasets.fetch import renames_atomically
from scalelab.store.protocols import (
    FsspecProtocol,
    HDFSProtocol,
    LocalProtocol,
    S3Protocol,
    StoreProtocol,
    WebHDFSProtocol,
)

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("file:///srv/course", LocalProtocol),
        ("/srv/course", LocalProtocol),
        ("relative/course", LocalProtocol),
        ("s3://bucket/course", S3Protocol),
        ("s3a://bucket/course", S3Protocol),
        ("hdfs://nn:8020/course", HDFSProtocol),
        ("hdfs:///course", HDFSProtocol),
        ("webhdfs://nn:9870/course", WebHDFSProtocol),
        ("gcs://bucket/course", FsspecProtocol),
    ],
)
def test_each_url_is_served_by_its_protocol(url: str, kind: type[StoreProtocol]):
    assert type(protocols.for_url(url)) is kind


def test_the_registered_protocols_and_what_they_declare():
    by_name = {p.name: p for p in protocols.registered()}
    assert sorted(by_name) == ["file", "hdfs", "s3", "webhdfs"]
    assert by_name["file"].local and by_name["file"].atomic_rename and by_name["file"].folders
    assert not by_name["s3"].folders and not by_name["s3"].atomic_rename
    assert by_name["s3"].package == "s3fs" and by_name["hdfs"].package == "hdfs-native"
    assert by_name["hdfs"].hadoop and by_name["webhdfs"].hadoop and not by_name["s3"].hadoop
    assert not any(by_name[n].local for n in ("s3", "hdfs", "webhdfs"))
    other = protocols.for_url("gcs://bucket/course")
    assert other.name == "gcs" and other.package == "gcsfs" and not other.local


def test_an_open_file_system_is_recognised_through_the_store_root(tmp_path: Path):
    store = open_store(tmp_path.as_uri())
    assert type(protocols.for_fs(store)) is LocalProtocol  # a DirFileSystem: its inner one's
    assert renames_atomically(store)
    memory = fsspec.filesystem("memory")
    assert protocols.for_fs(memory).name == "memory" and not renames_atomically(memory)


def test_probe_addresses_per_protocol():
    env: dict[str, str] = {}
    s3 = protocols.for_url("s3://b/c")
    assert s3.probe_addresses("s3://b/c", {"endpoint_url": "http://minio:9000"}, env) == [
        ("minio", 9000)
    ]
    assert s3.probe_addresses("s3://b/c", {"client_kwargs": {"endpoint_url": "https://x"}}, env)
    assert s3.probe_addresses("s3://b/c", {}, env) == []  # AWS itself: nothing to probe
    web = protocols.for_url("webhdfs://nn/course")
    assert web.probe_addresses("webhdfs://nn/course", {}, env) == [("nn", 9870)]
    assert protocols.for_url("/srv/c").probe_addresses("/srv/c", {}, env) == []


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as it is, restored after the test."""
    monkeypatch.setattr(protocols, "_BY_SCHEME", dict(protocols._BY_SCHEME))
    yield


class MemoryCourse(StoreProtocol):
    """A new kind of store for the test: fsspec's in-memory file system, with a server that
    must answer (a port nothing listens on) and its own hint."""

    schemes = ("memory",)
    fs_protocols = frozenset({"memory"})
    setting_hint = "the memory course's switch"
    folders = False

    def __init__(self, port: int) -> None:
        self.port = port

    def probe_addresses(self, url: str, options: Any, environ: Any) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.port)]


@pytest.mark.usefixtures("registry")
def test_a_new_protocol_is_one_class_and_one_registration(unused_tcp_port: int):
    protocols.register(MemoryCourse(unused_tcp_port))
    url = "memory://course-protocols"
    with pytest.raises(StoreUnavailableError, match="memory course's switch"):
        check_store(url, {})  # its probe and its hint
    alice = student_store("alice", url)
    assert alice.store_protocol.name == "memory"
    alice.makedirs("home/alice/new")  # no folders: nothing made, nothing asked
    assert not alice.exists("home/alice/new")
    alice.pipe_file("home/alice/a.txt", b"mine")
    assert alice.cat_file("home/alice/a.txt") == b"mine"
    with pytest.raises(PermissionError):
        alice.pipe_file("home/bob/a.txt", b"not mine")


def test_an_unknown_protocol_is_a_configuration_error_naming_it():
    with pytest.raises(StoreConfigError, match=r"'hdfss'.*fsspec does not know"):
        check_store("hdfss://nn/course", {})


def _derives(name: str, classes: dict[str, ast.ClassDef], seen: frozenset[str]) -> bool:
    """Whether the class ``name`` of one file derives, within the file, from AbstractFixtures."""
    bases = [b.id for b in classes[name].bases if isinstance(b, ast.Name)]
    if "AbstractFixtures" in bases:
        return True
    return any(b in classes and b not in seen and _derives(b, classes, seen | {b}) for b in bases)


def _protocol_set(node: ast.ClassDef) -> str:
    """The string a class body assigns to ``protocol``, else ""."""
    for stmt in node.body:
        if (
            isinstance(stmt, ast.Assign)
            and [getattr(t, "id", "") for t in stmt.targets] == ["protocol"]
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
        ):
            return stmt.value.value
    return ""


def _conformance_protocols() -> dict[str, list[str]]:
    """Protocol -> the test classes under tests/ that run fsspec's abstract tests on it: classes
    deriving (in their file) from ``AbstractFixtures`` that set ``protocol = "<name>"``."""
    found: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for name, node in classes.items():
            protocol = _protocol_set(node)
            if protocol and _derives(name, classes, frozenset({name})):
                found.setdefault(protocol, []).append(f"{path.name}::{name}")
    return found


def test_every_registered_protocol_runs_fsspecs_conformance_tests():
    running = _conformance_protocols()
    missing = [p.name for p in protocols.registered() if p.name not in running]
    assert not missing, (
        f"no test class runs fsspec.tests.abstract on {missing}: add one (AbstractFixtures and "
        "the Abstract*Tests, protocol = '<name>') beside the protocol's other tests"
    )
    assert set(running) >= {"file", "s3", "hdfs", "webhdfs"}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("hdfss://nn:8020/course", r"'hdfss', which fsspec does not know: did you mean hdfs://\?"),
        ("s4://bucket/course", r"'s4', which fsspec does not know: ScaleLab's stores are"),
    ],
)
def test_an_unknown_store_protocol_is_refused_at_hub_start(url: str, message: str):
    from traitlets.config import Config

    from scalelab.spawner.validation import validate_spawner_config

    c = Config()
    c.ScaleLabSpawner.store_url = url
    with pytest.raises(ValueError, match=rf"c\.ScaleLabSpawner\.store_url = .*{message}"):
        validate_spawner_config(c)
    c.ScaleLabSpawner.store_url = "gcs://bucket/course"  # known to fsspec: its package is the
    validate_spawner_config(c)  # servers' concern, checked by the doctor and each kernel
