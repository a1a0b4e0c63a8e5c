"""The course store's folder in the home: contents API paths <-> jupyter-fs' drive paths (pure)."""

from __future__ import annotations

import pytest

from scalelab.hub_ext.server.store_folder import (
    api_model,
    api_path,
    check_folder_name,
    crossing_message,
    drive_path,
    store_part,
    with_entry,
)


@pytest.mark.parametrize(
    ("path", "part"),
    [
        ("store", ""),
        ("/store/", ""),
        ("store/home/alice/x.csv", "home/alice/x.csv"),
        ("/store/datasets/songs/", "datasets/songs"),
        ("store/../x", "../x"),  # passed on for the store's guard to refuse
        ("store//etc/passwd", "/etc/passwd"),
        ("", None),
        ("stores/x", None),
        ("storex", None),
        ("notes/store/x", None),
        ("x/../store/home", None),  # the home's: its own manager keeps it in the home
    ],
)
def test_store_part_is_the_path_below_the_folder(path: str, part: str | None):
    assert store_part(path, "store") == part


def test_paths_go_to_the_drive_and_back():
    assert drive_path("home/alice/x.csv", "1a2b3c4d") == "1a2b3c4d:home/alice/x.csv"
    assert drive_path("", "1a2b3c4d") == "1a2b3c4d:"
    assert api_path("home/alice/x.csv", "store") == "store/home/alice/x.csv"
    assert api_path("/home/alice/", "course") == "course/home/alice"
    assert api_path("", "store") == "store"


def test_a_listing_comes_back_under_the_folder_with_what_may_be_written():
    listing = {
        "name": "",
        "path": "",
        "type": "directory",
        "writable": True,
        "content": [
            {"name": "datasets", "path": "datasets", "type": "directory", "writable": True},
            {"name": "alice", "path": "home/alice", "type": "directory", "writable": True},
        ],
    }
    mapped = api_model(listing, "store", lambda p: p.startswith("home/alice"))
    assert (mapped["name"], mapped["path"], mapped["writable"]) == ("store", "store", False)
    assert [(e["path"], e["writable"]) for e in mapped["content"]] == [
        ("store/datasets", False),
        ("store/home/alice", True),
    ]
    assert listing["path"] == "" and listing["content"][1]["path"] == "home/alice"  # untouched
    file = {"name": "x.csv", "path": "home/alice/x.csv", "type": "file", "content": "a,b"}
    assert api_model(file, "store")["path"] == "store/home/alice/x.csv"
    assert api_model(file, "store")["content"] == "a,b"


def test_the_folder_is_added_to_the_home_listing_unless_the_home_has_its_own():
    entry = {"name": "store", "path": "store", "type": "directory"}
    home = {"type": "directory", "content": [{"name": "lab1.ipynb", "type": "notebook"}]}
    assert [e["name"] for e in with_entry(home, entry)["content"]] == ["lab1.ipynb", "store"]
    real = {"name": "store", "path": "store", "type": "file"}
    own = {"type": "directory", "content": [real]}
    assert with_entry(own, entry)["content"] == [real]


def test_a_move_between_the_home_and_the_store_says_to_copy():
    into = crossing_message("notes.txt", "store/home/alice/notes.txt", "store")
    assert into.startswith("Moving 'notes.txt' to the course store is not possible")
    assert "Paste in store/home/alice" in into
    out = crossing_message("store/home/alice/x.csv", "x.csv", "store")
    assert "to your home is not possible" in out and "Paste in your home's top folder" in out
    named = crossing_message("Untitled Folder", "store", "store")
    assert (
        named
        == "'store' is the name of the course store's folder in your home: choose another name."
    )


@pytest.mark.parametrize("bad", ["", ".store", "a/b", "a\\b", "drive:x", "..", "."])
def test_a_folder_name_must_be_one_visible_name(bad: str):
    with pytest.raises(ValueError, match="cannot name the course store's folder"):
        check_folder_name(bad)
    assert check_folder_name("course store") == "course store"
