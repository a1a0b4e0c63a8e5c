"""A hostile student (alice) against the guard of the course store, on a real local store.

Bob's home, another student's home, the ops folder and a folder beside the store hold secrets;
alice's home holds links to them. Every call that walks the store (get, copy, cp, find, glob,
walk, du, expand_path, ls, cat, put, rm, mv and their list, dict, keyword and ``maxdepth``
forms) must show and copy only what alice may read, never follow or list a link that leaves
home/alice/ and datasets/, and refuse an explicit path outside them with the guard's
StoreAccessError.

This file makes 174 attempts to reach what a student may not (another's home, ops, /etc, a folder
beside the store, writes into datasets/) in 156 test cases (parametrized cases counted; a few
cases make several calls).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scalelab.store import StoreAccessError, StudentStore, student_store

#: What alice may read, by content: her own files and the data set.
ALICE_OWN = {"home/alice/own.txt": b"alice-notes", "home/alice/sub/deep.txt": b"alice-deep"}
SONGS = {"datasets/songs/part-0.csv": b"year\n2001\n", "datasets/songs/nested/part-1.csv": b"y\n"}
ALLOWED = set(ALICE_OWN.values()) | set(SONGS.values())
#: Links in alice's home that leave the allowed roots (relative to home/alice).
ESCAPING = ["to-bob", "to-bob.txt", "sub/to-bob-deep.txt", "to-etc", "to-parent"]
ESCAPING += ["to-outside.txt", "to-ops.txt", "to-alice2"]
#: A link that stays inside them (to a data set file): listed and readable, not writable.
INSIDE_LINK = "home/alice/to-songs.csv"
#: Every secret holds this word; nothing alice may read does.
SECRET = b"SECRET"

# du of alice's view: her files, the link to a data set file (its size) and the data set.
ALICE_BYTES = sum(map(len, ALICE_OWN.values())) + len(SONGS["datasets/songs/part-0.csv"])
SONGS_BYTES = sum(map(len, SONGS.values()))

OUTSIDE = r"is not allowed: in the course store you may read and write home/alice/\.\.\."
LINK = r"is a link"


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    """tmp_path/course: homes of alice, bob and alice2, a data set, ops; a secret beside it."""
    root = tmp_path / "course"
    files = {
        **ALICE_OWN,
        **SONGS,
        "home/bob/secret.txt": b"BOB-SECRET",
        "home/bob/deep/more.txt": b"BOB-SECRET-DEEP",
        "home/alice2/notes.txt": b"ALICE2-SECRET",
        "ops/credentials": b"ROOT-SECRET",
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/secret.txt").write_bytes(b"OUTSIDE-SECRET")
    home = root / "home/alice"
    links = {
        "to-bob": root / "home/bob",
        "to-bob.txt": root / "home/bob/secret.txt",
        "sub/to-bob-deep.txt": Path("../../bob/deep/more.txt"),  # relative, one level down
        "to-etc": Path("/etc"),
        "to-parent": tmp_path,  # the store root's parent
        "to-outside.txt": tmp_path / "outside/secret.txt",
        "to-ops.txt": root / "ops/credentials",
        "to-alice2": root / "home/alice2",
        "to-songs.csv": root / "datasets/songs/part-0.csv",
    }
    for name, target in links.items():
        (home / name).symlink_to(target)
    return root


@pytest.fixture
def alice(store_root: Path) -> StudentStore:
    return student_store("alice", store_root.as_uri())


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (links not followed) by relative path, with its content."""
    out = {}
    for top, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(top) / name
            out[str(path.relative_to(folder))] = (
                b"<link>" if path.is_symlink() else path.read_bytes()
            )
    return out


def _names(result) -> list[str]:
    """The paths in a listing: a list of names or infos, a dict, or walk's triples."""
    if isinstance(result, dict):
        return list(result)
    names = []
    for item in result:
        if isinstance(item, tuple):  # walk: (root, dirs, files)
            root, dirs, files = item
            names += [f"{root}/{n}".lstrip("/") for n in [*dirs, *files]]
        else:
            names.append(item["name"] if isinstance(item, dict) else item)
    return names


def _assert_no_leak(copied: dict[str, bytes]) -> None:
    """What a copy produced holds only what alice may read, and something of it."""
    leaked = {k: v for k, v in copied.items() if SECRET in v or v not in ALLOWED}
    assert not leaked, f"copied what alice may not read: {leaked}"
    assert set(copied.values()) & ALLOWED, f"nothing alice may read was copied: {copied}"
    escaping = [k for k in copied if any(part in k for part in ("bob", "etc", "parent", "ops"))]
    assert not escaping, escaping


def _assert_store_intact(store_root: Path) -> None:
    assert (store_root / "home/bob/secret.txt").read_bytes() == b"BOB-SECRET"
    assert (store_root / "home/bob/deep/more.txt").read_bytes() == b"BOB-SECRET-DEEP"
    assert sorted(_files(store_root / "home/bob")) == ["deep/more.txt", "secret.txt"]
    assert (store_root / "home/alice2/notes.txt").read_bytes() == b"ALICE2-SECRET"
    assert _files(store_root / "datasets") == {k[len("datasets/") :]: v for k, v in SONGS.items()}


# -- recursive copies out of a listable folder ----------------------------------------------------

GETS = [
    (("home",), {"recursive": True}),
    (("",), {"recursive": True}),
    (("home/",), {"recursive": True}),
    (("home/alice",), {"recursive": True}),
    (("home/*",), {"recursive": True}),
    (("home/**",), {}),
    (("**",), {}),
    (("home/*/*",), {}),
    (("home/*/*.txt",), {}),
    (("home",), {"recursive": True, "maxdepth": 2}),
    (("",), {"recursive": True, "maxdepth": 3}),
    (("home/**",), {"maxdepth": 2}),
    ((["home"],), {"recursive": True}),
    ((["", "home"],), {"recursive": True}),
    ((["home/alice/own.txt", "home/alice/to-bob.txt"],), {}),
]


@pytest.mark.parametrize(("args", "kwargs"), GETS)
def test_get_copies_out_only_what_alice_may_read(
    alice: StudentStore, store_root: Path, tmp_path: Path, args: tuple, kwargs: dict
):
    dest = tmp_path / "dest"
    try:
        alice.get(*args, f"{dest}/", **kwargs)
    except StoreAccessError as refused:  # a list naming an escaping link: refused whole
        assert isinstance(args[0], list) and "to-bob.txt" in str(refused)
        assert not dest.exists() or not _files(dest)
        return
    _assert_no_leak(_files(dest))
    _assert_store_intact(store_root)


@pytest.mark.parametrize("rpath", ["home", "", ["home"]])
def test_get_by_keyword_copies_out_only_what_alice_may_read(
    alice: StudentStore, tmp_path: Path, rpath
):
    alice.get(rpath=rpath, lpath=f"{tmp_path / 'dest'}/", recursive=True)
    _assert_no_leak(_files(tmp_path / "dest"))


@pytest.mark.parametrize("method", ["copy", "cp"])
@pytest.mark.parametrize(
    ("source", "kwargs"),
    [
        ("home", {"recursive": True}),
        ("", {"recursive": True}),
        ("home/alice", {"recursive": True}),
        ("home/*", {"recursive": True}),
        ("home/**", {}),
        ("home", {"recursive": True, "maxdepth": 2}),
        (["home"], {"recursive": True}),
    ],
)
def test_copy_inside_the_store_copies_only_what_alice_may_read(
    alice: StudentStore, store_root: Path, method: str, source, kwargs: dict
):
    getattr(alice, method)(source, "home/alice/stolen/", **kwargs)
    _assert_no_leak(_files(store_root / "home/alice/stolen"))
    _assert_store_intact(store_root)


def test_copy_by_keyword_copies_only_what_alice_may_read(alice: StudentStore, store_root: Path):
    alice.copy(path1="home", path2="home/alice/stolen/", recursive=True)
    _assert_no_leak(_files(store_root / "home/alice/stolen"))


# -- links in the home that leave the allowed roots -----------------------------------------------

LISTINGS = [
    ("find", ("home/alice",), {}),
    ("find", ("",), {}),
    ("find", ("home",), {"withdirs": True, "detail": True}),
    ("find", ("",), {"maxdepth": 3, "withdirs": True}),
    ("find", ("home/alice/sub",), {"detail": True}),
    ("glob", ("home/alice/*",), {}),
    ("glob", ("home/alice/*.txt",), {}),
    ("glob", ("home/**",), {}),
    ("glob", ("**",), {"detail": True}),
    ("glob", ("**/to-*",), {}),
    ("glob", ("home/**",), {"maxdepth": 2}),
    ("glob", ("home/alice/to-*",), {}),
    ("walk", ("home/alice",), {}),
    ("walk", ("",), {"detail": True}),
    ("walk", ("home",), {"maxdepth": 2}),
    ("walk", ("",), {"topdown": False}),
    ("expand_path", ("home/alice",), {"recursive": True}),
    ("expand_path", ("home/alice/*",), {}),
    ("expand_path", (["home", "datasets"],), {"recursive": True}),
    ("expand_path", ("**",), {"maxdepth": 3}),
    ("du", ("home",), {"total": False}),
    ("du", ("",), {"total": False, "withdirs": True}),
    ("ls", ("home/alice",), {"detail": False}),
    ("ls", ("home/alice/sub",), {"detail": True}),
]


@pytest.mark.parametrize(("method", "args", "kwargs"), LISTINGS)
def test_listings_leave_out_links_that_leave_the_allowed_roots(
    alice: StudentStore, method: str, args: tuple, kwargs: dict
):
    names = _names(getattr(alice, method)(*args, **kwargs))
    shown = [n for n in names if any(n.startswith(f"home/alice/{e}") for e in ESCAPING)]
    assert not shown, f"{method} listed links that leave home/alice/ and datasets/: {shown}"
    assert not [n for n in names if "bob" in n or "ops" in n or "alice2" in n]
    assert names, "nothing listed: the listing must still show alice's files"
    if "to-" in args[0] or args[0] in ("", "home", "home/alice", "**"):
        assert INSIDE_LINK in names, names  # a link that stays inside is still listed


@pytest.mark.parametrize(
    ("link", "target", "own"),
    [("to-homes", "home", "alice/own.txt"), ("to-root", "", "home/alice/own.txt")],
)
def test_a_link_to_a_listable_folder_shows_only_alices_part(
    alice: StudentStore, store_root: Path, tmp_path: Path, link: str, target: str, own: str
):
    # The store root and home/ may be listed, so the link itself is allowed; what is under it
    # is checked where it really is: home/bob/... through it stays refused and unlisted.
    (store_root / "home/alice" / link).symlink_to(store_root / target)
    found = alice.find(f"home/alice/{link}", withdirs=True)
    assert f"home/alice/{link}/{own}" in found, found  # alice's own part, seen through it
    assert not [p for p in found if "bob" in p or "ops" in p or "alice2" in p], found
    alice.get(f"home/alice/{link}", f"{tmp_path / 'dest'}/", recursive=True)
    _assert_no_leak(_files(tmp_path / "dest"))


@pytest.mark.parametrize(
    ("path", "kwargs"),
    [
        ("home/alice/*", {"on_error": "omit"}),  # its folder sub/ cannot be read: omitted
        ("home/alice/*.txt", {}),
        ("home/alice/sub/*", {}),
        ("home/alice", {"recursive": True, "on_error": "omit"}),
        (["home/alice/own.txt", "home/alice/sub/deep.txt"], {}),
        ("**/*.txt", {}),
    ],
)
def test_cat_of_many_reads_only_what_alice_may_read(alice: StudentStore, path, kwargs: dict):
    out = alice.cat(path, **kwargs)
    contents = {k: v for k, v in out.items() if isinstance(v, bytes)}
    _assert_no_leak(contents)


def test_a_recursive_get_of_the_home_does_not_follow_links(
    alice: StudentStore, store_root: Path, tmp_path: Path
):
    alice.get("home/alice", f"{tmp_path / 'dest'}/", recursive=True)
    copied = _files(tmp_path / "dest")
    assert copied == {"alice/own.txt": b"alice-notes", "alice/sub/deep.txt": b"alice-deep"} | {
        "alice/to-songs.csv": b"year\n2001\n"
    }


def test_fsspecs_other_names_for_these_calls_go_through_the_same_rule(
    alice: StudentStore, tmp_path: Path
):
    alice.download("home", f"{tmp_path / 'dest'}/", recursive=True)
    _assert_no_leak(_files(tmp_path / "dest"))
    assert alice.disk_usage("home") == ALICE_BYTES
    assert alice.listdir("home", detail=False) == ["home/alice"]
    mapping = alice.get_mapper("home/alice")
    assert sorted(mapping) == ["own.txt", "sub/deep.txt", "to-songs.csv"]
    assert "to-bob" not in alice.tree("home", recursion_limit=3) and "bob" not in alice.tree("")
    for read in (alice.read_bytes, alice.read_text, alice.head, alice.tail):
        with pytest.raises(StoreAccessError, match=LINK):
            read("home/alice/to-bob.txt")


# -- du --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "kwargs", "expected"),
    [
        ("home", {}, ALICE_BYTES),
        ("", {}, ALICE_BYTES + SONGS_BYTES),
        ("home/alice", {}, ALICE_BYTES),
        ("home", {"maxdepth": 2}, ALICE_BYTES - len(ALICE_OWN["home/alice/sub/deep.txt"])),
        ("datasets", {}, SONGS_BYTES),
    ],
)
def test_du_counts_only_what_alice_may_read(alice: StudentStore, path: str, kwargs, expected):
    assert alice.du(path, **kwargs) == expected


def test_du_by_file_names_only_what_alice_may_read(alice: StudentStore):
    sizes = alice.du("", total=False)
    assert sizes == {**{k: len(v) for k, v in {**ALICE_OWN, **SONGS}.items()}, INSIDE_LINK: 10}


# -- explicit paths outside the allowed roots ------------------------------------------------------

REFUSED = [
    ("find", ("home/bob",), {}, OUTSIDE),
    ("find", ("home/alice2",), {"withdirs": True, "detail": True}, OUTSIDE),
    ("find", ("ops",), {"maxdepth": 1}, OUTSIDE),
    ("walk", ("home/bob",), {}, OUTSIDE),
    ("walk", ("ops",), {"detail": True}, OUTSIDE),
    ("glob", ("home/bob/*",), {}, OUTSIDE),
    ("glob", ("home/bob/**",), {"maxdepth": 2}, OUTSIDE),
    ("glob", ("home/bob/secret.txt",), {}, OUTSIDE),
    ("du", ("home/bob",), {}, OUTSIDE),
    ("du", ("ops",), {"total": False}, OUTSIDE),
    ("expand_path", ("home/bob",), {"recursive": True}, OUTSIDE),
    ("expand_path", (["home/alice", "home/bob"],), {"recursive": True}, OUTSIDE),
    ("expand_path", ("home/bob/*",), {}, OUTSIDE),
    ("ls", ("home/bob",), {}, OUTSIDE),
    ("info", ("home/bob/secret.txt",), {}, OUTSIDE),
    ("size", ("home/bob/secret.txt",), {}, OUTSIDE),
    ("sizes", (["home/alice/own.txt", "home/bob/secret.txt"],), {}, OUTSIDE),
    ("sizes", (), {"paths": ["home/bob/secret.txt"]}, OUTSIDE),
    ("checksum", ("home/bob/secret.txt",), {}, OUTSIDE),
    ("ukey", ("home/bob/secret.txt",), {}, OUTSIDE),
    ("cat_ranges", (["home/bob/secret.txt"], 0, 5), {}, OUTSIDE),
    ("cat_ranges", (), {"paths": ["home/bob/secret.txt"], "starts": 0, "ends": 5}, OUTSIDE),
    ("cat", (["home/alice/own.txt", "home/bob/secret.txt"],), {}, OUTSIDE),
    ("cat", ("home/bob/*",), {}, OUTSIDE),
    ("cat", ("home/bob",), {"recursive": True}, OUTSIDE),
    ("cat_file", (), {"path": "home/bob/secret.txt"}, OUTSIDE),
    ("get_file", ("home/bob/secret.txt", "{dest}/x"), {}, OUTSIDE),
    ("get_file", (), {"rpath": "home/bob/secret.txt", "lpath": "{dest}/x"}, OUTSIDE),
    ("get", ("home/bob", "{dest}/"), {"recursive": True}, OUTSIDE),
    ("get", (), {"rpath": "home/bob", "lpath": "{dest}/", "recursive": True}, OUTSIDE),
    ("get", (["home/bob/secret.txt"], ["{dest}/x"]), {}, OUTSIDE),
    ("get", ("home/bob/*", "{dest}/"), {}, OUTSIDE),
    ("copy", ("home/bob", "home/alice/stolen"), {"recursive": True}, OUTSIDE),
    ("copy", (["home/bob/secret.txt"], ["home/alice/x"]), {}, OUTSIDE),
    ("copy", (), {"path1": "home/bob", "path2": "home/alice/x", "recursive": True}, OUTSIDE),
    ("cp_file", ("home/bob/secret.txt", "home/alice/x"), {}, OUTSIDE),
    ("open", ("home/bob/secret.txt",), {}, OUTSIDE),
    ("rm", ("home",), {"recursive": True}, r"deleting 'home' is not allowed"),
    ("rm", ("",), {"recursive": True}, r"deleting '' is not allowed"),
    ("rm", (["home/alice/own.txt", "home/bob/secret.txt"],), {}, r"deleting 'home/bob"),
    ("rm", ("home/*",), {"recursive": True}, r"deleting 'home/\*' is not allowed"),
    ("mv", ("home", "home/alice/moved"), {"recursive": True}, r"moving 'home' is not allowed"),
    ("mv", ("home/bob", "home/alice/taken"), {"recursive": True}, r"moving 'home/bob'"),
    ("put", ("{local}", "home/bob/"), {"recursive": True}, r"writing 'home/bob' is not"),
    ("put", (), {"lpath": "{local}/a.txt", "rpath": "home/bob/a.txt"}, r"writing 'home/bob"),
    ("put_file", ("{local}/a.txt", "home/alice2/a.txt"), {}, r"writing 'home/alice2"),
    ("pipe", ({"home/alice/ok.txt": b"x", "home/bob/planted": b"x"},), {}, r"writing 'home/bob"),
]
# The same through alice's links: an explicit path through a link that leaves the roots.
REFUSED += [
    ("find", ("home/alice/to-bob",), {}, LINK),
    ("find", ("home/alice/to-parent",), {"withdirs": True}, LINK),
    ("walk", ("home/alice/to-etc",), {}, LINK),
    ("glob", ("home/alice/to-bob/*",), {}, LINK),
    ("glob", ("home/alice/to-parent/**",), {}, LINK),
    ("du", ("home/alice/to-bob",), {}, LINK),
    ("du", ("home/alice/to-parent",), {}, LINK),
    ("expand_path", ("home/alice/to-bob",), {"recursive": True}, LINK),
    ("ls", ("home/alice/to-bob",), {}, LINK),
    ("info", ("home/alice/to-bob.txt",), {}, LINK),
    ("size", ("home/alice/sub/to-bob-deep.txt",), {}, LINK),
    ("checksum", ("home/alice/to-outside.txt",), {}, LINK),
    ("ukey", ("home/alice/to-ops.txt",), {}, LINK),
    ("cat", ("home/alice/to-bob/*",), {}, LINK),
    ("cat", (["home/alice/to-bob.txt"],), {}, LINK),
    ("cat_ranges", (["home/alice/to-bob.txt"], 0, 3), {}, LINK),
    ("cat_file", ("home/alice/to-alice2/notes.txt",), {}, LINK),
    ("open", ("home/alice/to-bob.txt",), {}, LINK),
    ("open", ("home/alice/to-bob/secret.txt",), {}, LINK),
    ("get_file", ("home/alice/to-bob.txt", "{dest}/x"), {}, LINK),
    ("get", ("home/alice/to-bob", "{dest}/"), {"recursive": True}, LINK),
    ("get", ("home/alice/to-parent/outside/secret.txt", "{dest}/x"), {}, LINK),
    ("copy", ("home/alice/to-bob", "home/alice/stolen"), {"recursive": True}, LINK),
    ("cp_file", ("home/alice/to-outside.txt", "home/alice/x"), {}, LINK),
    ("mv", ("home/alice/sub", "home/alice/to-bob/sub"), {"recursive": True}, LINK),
    ("put", ("{local}/a.txt", "home/alice/to-bob/a.txt"), {}, LINK),
    ("pipe_file", ("home/alice/to-alice2/planted", b"x"), {}, LINK),
]


@pytest.mark.parametrize(("method", "args", "kwargs", "message"), REFUSED)
def test_explicit_paths_outside_the_allowed_roots_are_refused(
    alice: StudentStore,
    store_root: Path,
    tmp_path: Path,
    method: str,
    args: tuple,
    kwargs: dict,
    message: str,
):
    local = tmp_path / "local"
    local.mkdir()
    (local / "a.txt").write_bytes(b"planted")

    def fill(value):
        if isinstance(value, str):
            return value.format(dest=tmp_path / "dest", local=local)
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    args = tuple(fill(a) for a in args)
    kwargs = {k: fill(v) for k, v in kwargs.items()}
    with pytest.raises(StoreAccessError, match=message):
        result = getattr(alice, method)(*args, **kwargs)
        if method == "walk":
            list(result)
    assert not (tmp_path / "dest").exists() or not _files(tmp_path / "dest")
    assert not (store_root / "home/alice/stolen").exists()
    assert not (store_root / "home/alice/ok.txt").exists()  # a refused dict writes nothing
    assert (store_root / "home/alice/own.txt").read_bytes() == b"alice-notes"
    _assert_store_intact(store_root)


# -- writes that a walk would carry through a link -------------------------------------------------


def test_put_of_a_tree_does_not_write_through_a_link_in_the_home(
    alice: StudentStore, store_root: Path, tmp_path: Path
):
    tree = tmp_path / "upload"
    (tree / "to-bob").mkdir(parents=True)
    (tree / "to-bob/planted.txt").write_bytes(b"planted")
    with pytest.raises(StoreAccessError, match=LINK):
        alice.put(f"{tree}/", "home/alice/", recursive=True)
    _assert_store_intact(store_root)


def test_copy_of_a_tree_does_not_write_through_a_link_in_the_home(
    alice: StudentStore, store_root: Path
):
    alice.pipe_file("home/alice/src/to-bob/planted.txt", b"planted")
    with pytest.raises(StoreAccessError, match=LINK):
        alice.copy("home/alice/src/", "home/alice/", recursive=True)
    _assert_store_intact(store_root)


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("pipe_file", (INSIDE_LINK, b"overwritten")),
        ("open", (INSIDE_LINK, "ab")),
        ("touch", (INSIDE_LINK,)),
        ("rm_file", (INSIDE_LINK,)),
    ],
)
def test_writes_through_a_link_to_the_datasets_are_refused(
    alice: StudentStore, store_root: Path, method: str, args: tuple
):
    with pytest.raises(StoreAccessError, match=r"read-only|link"):
        f = getattr(alice, method)(*args)
        if method == "open":
            f.write(b"appended")
            f.close()
    _assert_store_intact(store_root)


def test_rm_of_the_home_removes_links_not_what_they_point_to(alice: StudentStore, store_root: Path):
    alice.rm("home/alice/sub", recursive=True)
    alice.rm("home/alice", recursive=True)
    assert not (store_root / "home/alice").exists()
    _assert_store_intact(store_root)
    assert (store_root.parent / "outside/secret.txt").read_bytes() == b"OUTSIDE-SECRET"


# -- the fix does not hide what a student may read -------------------------------------------------


def test_bob_still_reads_and_copies_his_own_home(store_root: Path, tmp_path: Path):
    bob = student_store("bob", store_root.as_uri())
    bob.get("home", f"{tmp_path / 'dest'}/", recursive=True)
    assert _files(tmp_path / "dest") == {
        "home/bob/secret.txt": b"BOB-SECRET",
        "home/bob/deep/more.txt": b"BOB-SECRET-DEEP",
    }
    assert bob.du("home") == len(b"BOB-SECRET") + len(b"BOB-SECRET-DEEP")


def test_the_async_api_does_not_go_around_the_guard(alice: StudentStore):
    assert alice.async_impl is False  # libraries (zarr, ...) use the checked sync methods
    for name in ("_cat_file", "_find", "_get", "_ls", "_walk", "open_async"):
        with pytest.raises(StoreAccessError, match="asynchronous"):
            getattr(alice, name)("home/bob")
