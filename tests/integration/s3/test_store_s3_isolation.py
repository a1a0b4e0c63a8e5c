"""The S3 store itself keeps students out of each other's homes: SeaweedFS 4.48 on loopback.

Each student has a SeaweedFS identity of their own, written as :func:`seaweedfs_actions` writes
it (``Read``/``Write``/``List:course/home/<user>/*``, ``Read``/``List:course/datasets/*``), and
their server gets that key through :class:`~scalelab.spawner.store_identity.S3KeyFile` from
the hub's options (the hub's admin key). Every attempt below uses that raw credential with s3fs
or botocore directly -- no guard in between, as a student who bypasses ``student_store()``
would -- and asserts the *server's* answer.

What SeaweedFS 4.48 enforces, found by trying (its actions are ``<Action>:<bucket><key>``): an
action that ends in ``*`` is a prefix of ``<Action>:<bucket>/<object key>``, for object reads,
writes and deletes and, for ``List``, of the listing's ``prefix`` parameter, so
prefix-limited listing works; an action without ``*`` (``Read:course/home/alice`` or
``.../alice/``) grants nothing unless it names the bucket alone. ``Write`` covers PutObject,
multipart uploads, DeleteObject and CopyObject's target; CopyObject also needs ``Read`` on its
source. A refusal is HTTP 403 ``AccessDenied`` (HeadObject: a bare 403); DeleteObjects (the
bulk delete s3fs's ``rm`` uses) answers 200 with an ``AccessDenied`` error per key and deletes
nothing -- s3fs's ``rm`` then returns without raising, so the test checks the response and that
the file is still there.

Cross-user attempts, every one refused by the server: 14 per direction (alice against bob's
home, bob against alice's) through raw S3 calls -- the 13 of :data:`CROSS_USER` and a bulk
delete -- so 28 in all; and 6 per direction (12) again through s3fs's own file-system calls.
Writes to ``datasets/``, refused too: 3 raw calls and one s3fs call per student (8), besides the
bulk delete's second key. Two spellings with ``..`` per student get nothing of the other's
(a 400 for the object, an empty listing). After each attempt every home and the data set are
checked unchanged with ops' key.

The student's view (``student_store()``) with such a key: the store root and ``home/`` are the
view's own folders, listed and described without a request to the store, and walking calls from
them (find, walk, glob, du, expand_path, cat, a recursive get) ask the store only about
``home/<user>/...`` and ``datasets/...`` -- checked on the requests s3fs sends, for a student
with a file and for one with nothing in the store yet; a kernel starts with that view; and
fsspec's conformance tests pass on a home through its own key as through a bucket-wide one.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import s3fs

import tests.integration.s3.test_store_s3 as s3_conformance
from scalelab.spawner.store_identity import S3KeyFile, seaweedfs_actions
from scalelab.store import StudentStore, check_store, student_store
from scalelab.store.access.session import kernel_store
from tests.support.seaweed import ADMIN, SeaweedS3

STORE = "s3://course"
BUCKET = "course"
STUDENTS = {
    "alice": ("alice-key", "alice-secret-0123456789"),
    "bob": ("bob-key", "bob-secret-0123456789"),
}
#: The view's tests' students: one whose home holds its private file alone (others' tests
#: write in alice's, and SeaweedFS keeps a folder emptied by a delete), and one with nothing in
#: the store yet: no object under her home (S3 has no folders), where s3fs asks the store other
#: questions than for a home with files.
READER, NEWCOMER = "erin", "carol"
#: A student whose home only fsspec's conformance tests use.
CONFORMANCE = "dora"
KEYS = {
    **STUDENTS,
    READER: ("erin-key", "erin-secret-0123456789"),
    NEWCOMER: ("carol-key", "carol-secret-0123456789"),
    CONFORMANCE: ("dora-key", "dora-secret-0123456789"),
}
PRIVATE = b"only for its owner"
DATASET = "datasets/tiny/songs.csv"
DATA = b"year,loudness\n2001,-7.5\n"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """One SeaweedFS for the module: per-student identities, each home holding a private file,
    and a data set, all written with ops' admin key."""
    identities = {
        key: (secret, seaweedfs_actions(STORE, user)) for user, (key, secret) in KEYS.items()
    }
    server = SeaweedS3(tmp_path_factory.mktemp("seaweed-isolation"), identities)
    try:
        server.start()
        admin = s3fs.S3FileSystem(skip_instance_cache=True, **server.options(*ADMIN))
        admin.mkdir(BUCKET)
        for user in (*STUDENTS, READER):
            admin.pipe_file(f"{BUCKET}/home/{user}/private.txt", PRIVATE)
        admin.pipe_file(f"{BUCKET}/{DATASET}", DATA)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server_options(s3: SeaweedS3, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """user -> the storage options S3KeyFile hands that student's server (hub: the admin key)."""
    key_file = tmp_path_factory.mktemp("keys") / "store-keys.json"
    key_file.write_text(json.dumps({u: {"key": k, "secret": s} for u, (k, s) in KEYS.items()}))
    key_file.chmod(0o600)
    identity = S3KeyFile(key_file=str(key_file))
    hub_options = s3.options(*ADMIN)
    made = {u: identity.server_store_options(u, STORE, hub_options) for u in KEYS}
    for options in made.values():
        assert ADMIN[0] not in json.dumps(options) and ADMIN[1] not in json.dumps(options)
    return made


def _raw(options: dict[str, Any]) -> s3fs.S3FileSystem:
    """The student's own s3fs client: what their server's credential can do, no guard."""
    return s3fs.S3FileSystem(skip_instance_cache=True, **options)


def _other(user: str) -> str:
    return next(u for u in STUDENTS if u != user)


#: One attempt: (fs, me, other) -> the call; each must be refused by the server.
Attempt = Callable[[s3fs.S3FileSystem, str, str], Any]

CROSS_USER: dict[str, tuple[Attempt, str]] = {
    "read the other's file": (
        lambda fs, me, other: fs.call_s3(
            "get_object", Bucket=BUCKET, Key=f"home/{other}/private.txt"
        ),
        "AccessDenied",
    ),
    "read the other's file's metadata": (
        lambda fs, me, other: fs.call_s3(
            "head_object", Bucket=BUCKET, Key=f"home/{other}/private.txt"
        ),
        "403",  # a HEAD answer has no body, so no error code
    ),
    "write a new file into the other's home": (
        lambda fs, me, other: fs.call_s3(
            "put_object", Bucket=BUCKET, Key=f"home/{other}/planted.txt", Body=b"x"
        ),
        "AccessDenied",
    ),
    "overwrite the other's file": (
        lambda fs, me, other: fs.call_s3(
            "put_object", Bucket=BUCKET, Key=f"home/{other}/private.txt", Body=b"x"
        ),
        "AccessDenied",
    ),
    "start a multipart upload into the other's home": (
        lambda fs, me, other: fs.call_s3(
            "create_multipart_upload", Bucket=BUCKET, Key=f"home/{other}/big.bin"
        ),
        "AccessDenied",
    ),
    "delete the other's file": (
        lambda fs, me, other: fs.call_s3(
            "delete_object", Bucket=BUCKET, Key=f"home/{other}/private.txt"
        ),
        "AccessDenied",
    ),
    "copy the other's file into my home": (
        lambda fs, me, other: fs.call_s3(
            "copy_object",
            Bucket=BUCKET,
            Key=f"home/{me}/stolen.txt",
            CopySource={"Bucket": BUCKET, "Key": f"home/{other}/private.txt"},
        ),
        "AccessDenied",
    ),
    "copy my file into the other's home": (
        lambda fs, me, other: fs.call_s3(
            "copy_object",
            Bucket=BUCKET,
            Key=f"home/{other}/planted.txt",
            CopySource={"Bucket": BUCKET, "Key": f"home/{me}/private.txt"},
        ),
        "AccessDenied",
    ),
    "list the other's home": (
        lambda fs, me, other: fs.call_s3(
            "list_objects_v2", Bucket=BUCKET, Prefix=f"home/{other}/", Delimiter="/"
        ),
        "AccessDenied",
    ),
    "list the other's home (ListObjects v1)": (
        lambda fs, me, other: fs.call_s3("list_objects", Bucket=BUCKET, Prefix=f"home/{other}/"),
        "AccessDenied",
    ),
    "list every home": (
        lambda fs, me, other: fs.call_s3("list_objects_v2", Bucket=BUCKET, Prefix="home/"),
        "AccessDenied",
    ),
    "list the whole bucket": (
        lambda fs, me, other: fs.call_s3("list_objects_v2", Bucket=BUCKET),
        "AccessDenied",
    ),
    "write into a home whose name starts with mine": (
        lambda fs, me, other: fs.call_s3(
            "put_object", Bucket=BUCKET, Key=f"home/{me}x/planted.txt", Body=b"x"
        ),
        "AccessDenied",
    ),
}

DATASET_WRITES: dict[str, Attempt] = {
    "write a new file into datasets": lambda fs, me, other: fs.call_s3(
        "put_object", Bucket=BUCKET, Key="datasets/tiny/planted.csv", Body=b"x"
    ),
    "overwrite a data set file": lambda fs, me, other: fs.call_s3(
        "put_object", Bucket=BUCKET, Key=DATASET, Body=b"overwritten"
    ),
    "delete a data set file": lambda fs, me, other: fs.call_s3(
        "delete_object", Bucket=BUCKET, Key=DATASET
    ),
}


def _assert_refused(call: Callable[[], Any], code: str = "AccessDenied") -> None:
    """``call`` is refused by the server: HTTP 403 with ``code``, as s3fs's PermissionError."""
    with pytest.raises(PermissionError) as info:
        call()
    response = info.value.__cause__.response  # botocore's ClientError: the server's answer
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert response["Error"]["Code"] == code


def _untouched(s3: SeaweedS3) -> None:
    """Every home still holds exactly its private file, and the data set is intact."""
    admin = s3fs.S3FileSystem(skip_instance_cache=True, **s3.options(*ADMIN))
    for user in STUDENTS:
        assert admin.find(f"{BUCKET}/home/{user}") == [f"{BUCKET}/home/{user}/private.txt"]
        assert admin.cat_file(f"{BUCKET}/home/{user}/private.txt") == PRIVATE
    assert admin.find(f"{BUCKET}/datasets") == [f"{BUCKET}/{DATASET}"]
    assert admin.cat_file(f"{BUCKET}/{DATASET}") == DATA
    assert not admin.exists(f"{BUCKET}/home/alicex") and not admin.exists(f"{BUCKET}/home/bobx")


@pytest.mark.parametrize("user", list(STUDENTS))
@pytest.mark.parametrize("attempt", list(CROSS_USER))
def test_the_store_refuses_every_cross_user_attempt(
    s3: SeaweedS3, server_options: dict, user: str, attempt: str
):
    call, code = CROSS_USER[attempt]
    fs = _raw(server_options[user])
    _assert_refused(lambda: call(fs, user, _other(user)), code)
    _untouched(s3)


@pytest.mark.parametrize("user", list(STUDENTS))
@pytest.mark.parametrize("attempt", list(DATASET_WRITES))
def test_the_store_refuses_writes_to_the_data_sets(
    s3: SeaweedS3, server_options: dict, user: str, attempt: str
):
    fs = _raw(server_options[user])
    _assert_refused(lambda: DATASET_WRITES[attempt](fs, user, _other(user)))
    _untouched(s3)


@pytest.mark.parametrize("user", list(STUDENTS))
def test_a_bulk_delete_of_the_others_file_deletes_nothing(
    s3: SeaweedS3, server_options: dict, user: str
):
    """DeleteObjects answers 200 with an AccessDenied error per key; s3fs's ``rm`` (which uses
    it) therefore raises nothing, but nothing is deleted."""
    fs = _raw(server_options[user])
    other = _other(user)
    answer = fs.call_s3(
        "delete_objects",
        Bucket=BUCKET,
        Delete={"Objects": [{"Key": f"home/{other}/private.txt"}, {"Key": DATASET}]},
    )
    assert not answer.get("Deleted")
    assert sorted((e["Key"], e["Code"]) for e in answer["Errors"]) == [
        (DATASET, "AccessDenied"),
        (f"home/{other}/private.txt", "AccessDenied"),
    ]
    fs.rm(f"{BUCKET}/home/{other}/private.txt")  # silently refused
    _untouched(s3)


@pytest.mark.parametrize("user", list(STUDENTS))
def test_paths_with_dots_get_nothing_of_the_others_home(
    s3: SeaweedS3, server_options: dict, user: str
):
    fs = _raw(server_options[user])
    other = _other(user)
    with pytest.raises(OSError) as info:  # refused as an invalid request (400), not resolved
        fs.call_s3("get_object", Bucket=BUCKET, Key=f"home/{user}/../{other}/private.txt")
    assert info.value.__cause__.response["Error"]["Code"] == "InvalidRequest"
    # the prefix starts with the student's home, so the listing is allowed: it finds nothing
    listed = fs.call_s3("list_objects_v2", Bucket=BUCKET, Prefix=f"home/{user}/../{other}/")
    assert listed.get("Contents", []) == []
    _untouched(s3)


@pytest.mark.parametrize("user", list(STUDENTS))
def test_s3fs_calls_a_student_would_try_are_refused(s3: SeaweedS3, server_options: dict, user: str):
    """The same refusals through s3fs's file-system calls (PermissionError)."""
    fs = _raw(server_options[user])
    other = _other(user)
    for call in (
        lambda: fs.cat_file(f"{BUCKET}/home/{other}/private.txt"),
        lambda: fs.pipe_file(f"{BUCKET}/home/{other}/planted.txt", b"x"),
        lambda: fs.rm_file(f"{BUCKET}/home/{other}/private.txt"),
        lambda: fs.copy(f"{BUCKET}/home/{other}/private.txt", f"{BUCKET}/home/{user}/s.txt"),
        lambda: fs.ls(f"{BUCKET}/home/{other}"),
        lambda: fs.find(f"{BUCKET}/home"),
        lambda: fs.pipe_file(f"{BUCKET}/{DATASET}", b"overwritten"),
    ):
        fs.invalidate_cache()
        with pytest.raises(PermissionError):
            call()
    _untouched(s3)


@pytest.mark.parametrize("user", list(STUDENTS))
def test_a_student_reads_and_writes_their_home_and_reads_the_data_sets(
    s3: SeaweedS3, server_options: dict, user: str
):
    fs = _raw(server_options[user])
    home = f"{BUCKET}/home/{user}"
    assert fs.cat_file(f"{home}/private.txt") == PRIVATE
    fs.pipe_file(f"{home}/lab1/result.csv", b"rmse\n10.3\n")
    assert fs.cat_file(f"{home}/lab1/result.csv") == b"rmse\n10.3\n"
    big = bytes(range(256)) * (24 * 1024)  # 6 MiB: a multipart upload of 5 MiB parts
    with fs.open(f"{home}/model.bin", "wb", block_size=5 * 2**20) as f:
        f.write(big)
    assert fs.cat_file(f"{home}/model.bin") == big
    fs.copy(f"{BUCKET}/{DATASET}", f"{home}/songs-copy.csv")  # read datasets, write home
    assert sorted(fs.ls(home, detail=False)) == [
        f"{home}/lab1",
        f"{home}/model.bin",
        f"{home}/private.txt",
        f"{home}/songs-copy.csv",
    ]
    assert fs.cat_file(f"{BUCKET}/{DATASET}") == DATA
    assert fs.ls(f"{BUCKET}/datasets", detail=False) == [f"{BUCKET}/datasets/tiny"]
    assert fs.find(f"{BUCKET}/datasets") == [f"{BUCKET}/{DATASET}"]
    for name in ("lab1/result.csv", "model.bin", "songs-copy.csv"):
        fs.rm_file(f"{home}/{name}")
    fs.invalidate_cache()
    assert fs.find(home) == [f"{home}/private.txt"]
    _untouched(s3)


def test_the_students_view_works_on_its_home_and_data_sets_with_its_own_key(
    s3: SeaweedS3, server_options: dict
):
    store = student_store("alice", STORE, server_options["alice"])
    assert store.cat_file("home/alice/private.txt") == PRIVATE
    assert store.cat_file(DATASET) == DATA
    store.pipe_file("home/alice/notes.txt", b"mine")
    listed = set(store.ls("home/alice", detail=False))
    assert {"home/alice/notes.txt", "home/alice/private.txt"} <= listed
    assert not any(path.startswith("home/bob") for path in listed)
    store.rm_file("home/alice/notes.txt")
    with pytest.raises(PermissionError):  # the guard explains first; the store would refuse
        store.cat_file("home/bob/private.txt")
    _untouched(s3)


# -- the student's view with a key of its own: the root and home/ are the view's ----------------


def _own(user: str) -> dict[str, bytes]:
    """What the student's home holds in the store: the newcomer's nothing."""
    return {} if user == NEWCOMER else {f"home/{user}/private.txt": PRIVATE}


def _recorded(store: StudentStore) -> list[tuple[str, str | None, str]]:
    """Record each request the view's s3fs client sends from now on: (operation, key or
    prefix, "ok" or the exception's name)."""
    calls: list[tuple[str, str | None, str]] = []
    send = store.fs._call_s3

    async def call_s3(method: str, *args: Any, **kwargs: Any) -> Any:
        where = kwargs.get("Key", kwargs.get("Prefix"))
        try:
            answer = await send(method, *args, **kwargs)
        except Exception as exc:
            calls.append((method, where, type(exc).__name__))
            raise
        calls.append((method, where, "ok"))
        return answer

    store.fs._call_s3 = call_s3
    return calls


def _asked_only_the_roots(calls: list[tuple[str, str | None, str]], user: str) -> None:
    """Every request the server answered was for ``home/<user>/...`` or ``datasets/...``; the
    refused ones are only s3fs's own probes for an empty prefix (the newcomer's home): a HEAD of
    ``home/<user>`` as an object, and a listing of its parent ``home/``."""
    answered = [c for c in calls if c[2] == "ok"]
    assert all((c[1] or "").startswith((f"home/{user}/", "datasets/")) for c in answered), calls
    refused = {c for c in calls if c[2] != "ok"}
    probes = {("head_object", f"home/{user}", "PermissionError")}
    probes.add(("list_objects_v2", "home/", "PermissionError"))
    assert refused <= (probes if user == NEWCOMER else set()), calls


@pytest.mark.parametrize("user", [READER, NEWCOMER])
def test_the_students_view_lists_the_store_root_with_a_key_of_its_own(
    s3: SeaweedS3, server_options: dict, user: str
):
    """The root and home/ are the view's folders, and with the two roots they are directories
    without a request to the store (the newcomer's home has no object at all)."""
    store = student_store(user, STORE, server_options[user])
    calls = _recorded(store)
    home = f"home/{user}"
    assert sorted(store.ls("", detail=False)) == ["datasets", "home"]
    assert sorted((e["name"], e["type"]) for e in store.ls("")) == [
        ("datasets", "directory"),
        ("home", "directory"),
    ]
    assert store.ls("home", detail=False) == [home]
    assert [(e["name"], e["type"]) for e in store.ls("home")] == [(home, "directory")]
    for folder in ("", "home", home, "datasets"):
        assert store.info(folder) == {"name": folder, "size": 0, "type": "directory"}
        assert store.exists(folder) and store.isdir(folder) and not store.isfile(folder)
        assert store.size(folder) == 0
    assert not store.exists("home/bob") and not store.isdir("home/bob")  # the guard's answer
    assert calls == []  # none of it asked the store
    assert store.ls(home, detail=False) == list(_own(user))  # the newcomer's: empty
    assert store.ls("datasets", detail=False) == ["datasets/tiny"]
    _asked_only_the_roots(calls, user)
    _untouched(s3)


def _or_missing(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except FileNotFoundError:
        return "FileNotFoundError"


#: Walking calls from the root and home/: (call, expected from the user and their own files).
WALKS: dict[str, tuple[Callable[[StudentStore], Any], Callable[[str, list[str]], Any]]] = {
    'find("")': (lambda st: st.find(""), lambda u, own: sorted([DATASET, *own])),
    'find("home")': (lambda st: st.find("home"), lambda u, own: own),
    'find("", withdirs=True)': (
        lambda st: st.find("", withdirs=True),
        lambda u, own: sorted(["datasets", "datasets/tiny", DATASET, "home", f"home/{u}", *own]),
    ),
    'find("", maxdepth=2, withdirs=True)': (
        lambda st: st.find("", maxdepth=2, withdirs=True),
        lambda u, own: ["datasets", "datasets/tiny", "home", f"home/{u}"],
    ),
    'find("home", maxdepth=1, withdirs=True, detail=True)': (
        lambda st: {n: i["type"] for n, i in st.find("home", 1, True, detail=True).items()},
        lambda u, own: {"home": "directory", f"home/{u}": "directory"},
    ),
    'walk("")': (
        lambda st: list(st.walk("")),
        lambda u, own: [
            ("", ["datasets", "home"], []),
            ("datasets", ["tiny"], []),
            ("datasets/tiny", [], ["songs.csv"]),
            ("home", [u], []),
            (f"home/{u}", [], [p.rsplit("/", 1)[1] for p in own]),
        ],
    ),
    'walk("home", maxdepth=1)': (
        lambda st: list(st.walk("home", maxdepth=1)),
        lambda u, own: [("home", [u], [])],
    ),
    'glob("*")': (lambda st: st.glob("*"), lambda u, own: ["datasets", "home"]),
    'glob("home/*")': (lambda st: st.glob("home/*"), lambda u, own: [f"home/{u}"]),
    'glob("home/*/*")': (lambda st: st.glob("home/*/*"), lambda u, own: own),
    'glob("**/*.csv")': (lambda st: st.glob("**/*.csv"), lambda u, own: [DATASET]),
    'du("")': (lambda st: st.du(""), lambda u, own: len(DATA) + len(PRIVATE) * len(own)),
    'du("home", total=False)': (
        lambda st: st.du("home", total=False),
        lambda u, own: dict.fromkeys(own, len(PRIVATE)),
    ),
    'expand_path("", recursive=True)': (
        lambda st: st.expand_path("", recursive=True),
        lambda u, own: sorted(
            ["", "datasets", "datasets/tiny", DATASET, "home", f"home/{u}", *own]
        ),
    ),
    'exists("home/<user>")': (lambda st: st.exists(f"home/{st.view.user}"), lambda u, own: True),
    'info("home")': (lambda st: st.info("home")["type"], lambda u, own: "directory"),
    'cat("home/*/*")': (
        lambda st: _or_missing(lambda: st.cat("home/*/*")),
        lambda u, own: dict.fromkeys(own, PRIVATE) if own else "FileNotFoundError",  # fsspec's
    ),
}


@pytest.mark.parametrize("user", [READER, NEWCOMER])
@pytest.mark.parametrize("call", list(WALKS))
def test_walking_from_the_root_with_a_key_of_its_own_asks_only_for_the_roots(
    s3: SeaweedS3, server_options: dict, user: str, call: str
):
    """Walks from the root or home/ descend into home/<user> and datasets/ only: the key may
    list nothing else, and the answer is what the student may read."""
    store = student_store(user, STORE, server_options[user])
    calls = _recorded(store)
    run, expected = WALKS[call]
    assert run(store) == expected(user, sorted(_own(user)))
    _asked_only_the_roots(calls, user)
    _untouched(s3)


@pytest.mark.parametrize("user", [READER, NEWCOMER])
def test_a_recursive_get_of_the_root_copies_the_home_and_the_data_sets(
    s3: SeaweedS3, server_options: dict, user: str, tmp_path: Path
):
    store = student_store(user, STORE, server_options[user])
    calls = _recorded(store)
    store.get("", f"{tmp_path / 'copy'}/", recursive=True)
    copied = {
        str(p.relative_to(tmp_path / "copy")): p.read_bytes()
        for p in (tmp_path / "copy").rglob("*")
        if p.is_file()
    }
    assert copied == {DATASET: DATA, **_own(user)}
    _asked_only_the_roots(calls, user)


def test_folders_in_the_home_need_no_listing_of_the_bucket(s3: SeaweedS3, server_options: dict):
    """s3fs's mkdir lists the bucket's root (to see that it exists), which the key may not: on
    S3 the view makes no folder (a folder is there once a file is in it)."""
    store = student_store(NEWCOMER, STORE, server_options[NEWCOMER])
    calls = _recorded(store)
    store.makedirs(f"home/{NEWCOMER}", exist_ok=True)
    store.mkdir(f"home/{NEWCOMER}/lab1")
    assert calls == []
    with pytest.raises(PermissionError, match="home/carol"):  # the guard, before the store
        store.mkdir("home/bob/lab1")
    assert store.ls(f"home/{NEWCOMER}", detail=False) == []


def test_a_kernel_starts_with_the_view_under_a_key_of_its_own(s3: SeaweedS3, server_options: dict):
    """The kernel's start-up check (a TCP probe of the endpoint, no listing) passes, and
    ``store`` is the student's view, which lists the root."""
    env = {
        "SCALELAB_STORE_URL": STORE,
        "SCALELAB_STORE_OPTIONS": json.dumps(server_options[READER]),
        "JUPYTERHUB_USER": READER,
    }
    check_store(STORE, server_options[READER], environ=env)
    namespace: dict = {}
    banner = kernel_store(namespace, env)
    assert banner.startswith(f"course store: {STORE} ") and f"home/{READER} and" in banner
    store = namespace["store"]
    assert isinstance(store, StudentStore)
    assert sorted(store.ls("", detail=False)) == ["datasets", "home"]
    assert store.find("") == [DATASET, f"home/{READER}/private.txt"]


class TestTheViewWithAKeyOfItsOwnConformance(s3_conformance.TestStudentStoreOnS3Conformance):
    """fsspec.tests.abstract against a student's home through a key limited to it (the same
    back-end xfails as with a bucket-wide key)."""

    @pytest.fixture
    def fs(self, s3: SeaweedS3, server_options: dict) -> StudentStore:
        return student_store(CONFORMANCE, STORE, server_options[CONFORMANCE])

    @pytest.fixture
    def fs_path(self) -> str:
        return f"home/{CONFORMANCE}/conformance-{secrets.token_hex(3)}"
