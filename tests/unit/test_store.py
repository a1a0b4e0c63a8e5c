"""The store API on the local default: URL + storage_options -> an fsspec file system."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from scalelab.store import StoreConfigError, open_store, store_settings, store_url


def test_open_store_is_rooted_at_the_url_and_creates_a_local_root(tmp_path: Path):
    root = tmp_path / "course"
    fs = open_store(root.as_uri())
    assert root.is_dir()
    fs.makedirs("home/alice", exist_ok=True)
    fs.pipe_file("home/alice/notes.txt", b"hello")
    assert (root / "home" / "alice" / "notes.txt").read_bytes() == b"hello"
    assert fs.ls("home/alice", detail=False) == ["home/alice/notes.txt"]


def test_store_url_names_the_same_file_for_fsspec_and_url_readers(tmp_path: Path):
    url = (tmp_path / "course").as_uri()
    open_store(url).pipe_file("datasets/x.txt", b"42")
    with fsspec.open(store_url("datasets/x.txt", url=url)) as f:
        assert f.read() == b"42"
    assert store_url("datasets//x.txt", url=url + "/") == f"{url}/datasets/x.txt"


@pytest.mark.parametrize("bad", ["/etc/passwd", "../other", "datasets/../../x"])
def test_store_url_refuses_paths_that_leave_the_store(bad: str):
    with pytest.raises(StoreConfigError, match="relative to the store root"):
        store_url(bad, url="file:///srv/course")


def test_settings_come_from_the_environment_the_spawner_sets():
    env = {
        "SCALELAB_STORE_URL": "s3://bucket/course",
        "SCALELAB_STORE_OPTIONS": json.dumps({"anon": True}),
    }
    assert store_settings(env) == ("s3://bucket/course", {"anon": True})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "SCALELAB_STORE_URL is not set"),
        ({"SCALELAB_STORE_URL": "file:///x", "SCALELAB_STORE_OPTIONS": "{oops"}, "not valid JSON"),
        (
            {"SCALELAB_STORE_URL": "file:///x", "SCALELAB_STORE_OPTIONS": "[1]"},
            "must be a JSON object",
        ),
    ],
)
def test_bad_settings_name_the_variable_to_fix(env: dict, message: str):
    with pytest.raises(StoreConfigError, match=message):
        store_settings(env)


def test_unknown_protocol_is_a_clear_configuration_error():
    with pytest.raises(
        StoreConfigError, match=r"cannot open the course store 'nosuchproto://x'.*store_url"
    ):
        open_store("nosuchproto://x")
