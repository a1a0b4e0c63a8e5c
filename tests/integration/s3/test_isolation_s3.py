"""A hostile student on ``scalelab up`` with an S3 course store: a key per student, and the store
itself keeps them apart.

One SeaweedFS 4.48 on loopback (:mod:`tests.support.seaweed`) gives each student an identity of
their own
(:func:`~scalelab.spawner.store_identity.seaweedfs_actions`: ``home/<user>/*`` read-write,
``datasets/*`` read-only); one real ``scalelab up`` run by root, with a system user per student
(``jupyter-alice``, ``jupyter-bob``), has the store ``s3://course`` with ops' admin key in
``c.ScaleLabSpawner.store_options`` and :class:`~scalelab.spawner.store_identity.S3KeyFile`
handing each server its student's key from a 0600 JSON file. Bob's file in ``home/bob/`` and a
data set file in ``datasets/`` are put there with the admin key.

From alice's PySpark kernel, code tries six things -- read bob's file, list bob's home, write
into bob's home, delete bob's file, write into ``datasets/``, copy bob's file into her home --
each through five means: ``student_store()``, ``open_store(url)`` (the raw store, with her
server's ``SCALELAB_STORE_OPTIONS``), ``store.fs`` (the s3fs client under the kernel's ``store``),
``student_store()`` after setting ``JUPYTERHUB_USER=bob``, and a raw s3fs client made from her
options. That is :data:`ATTEMPTS` = 30 attempts, 25 of them cross-user (against bob's home) and
5 writes to ``datasets/``. Each must raise PermissionError. 7 are refused by the guard in her own
process before any request (StoreAccessError, :data:`BY_THE_GUARD`): the 6 through her own
``student_store()`` (5 cross-user), and the write to ``datasets/`` posing as bob (read-only for
every view; posing as bob, the copy reads through bob's view and writes through hers). The other
23 -- 20 cross-user, 3 writes to ``datasets/`` -- reach SeaweedFS, which answers each with HTTP
403 (found in the exception's chain). Besides these, s3fs's ``rm`` of bob's file (a bulk
DeleteObjects, which SeaweedFS answers 200 with an AccessDenied per key) returns without raising
and deletes nothing.

Afterwards bob's objects and the data set are checked unchanged with the admin key; alice's own
home and the data sets work (``student_store().ls("")`` included, the kernel's ``store`` made
at its start-up, and the course store drive's root listing through the contents API); and
neither the key nor the secret of the admin identity appears in the environment of alice's or
bob's server, alice's kernel or its Spark JVM (``/proc/<pid>/environ``, read by the test as
root), each server holding its own student's key.

Needs root, to make system users (CI runs as root): skipped, with that reason, otherwise. The
users it makes are removed at the end. One hub and one SeaweedFS for the module.
"""

from __future__ import annotations

import json
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import s3fs

from scalelab.hub_ext.server.store_drive import drive_id
from scalelab.spawner.store_identity import seaweedfs_actions
from tests.support.hubproc import ScaleLabUp, execute, server_process
from tests.support.seaweed import ADMIN, SeaweedS3
from tests.support.sysusers import MARKS, remove_users

pytestmark = MARKS

STORE = "s3://course"
BUCKET = "course"
KEYS = {
    "alice": ("alice-key", "alice-secret-0123456789"),
    "bob": ("bob-key", "bob-secret-0123456789"),
}
SECRET = b"bob's secret answer 42"
DATASET = "datasets/demo/part.csv"
DATA = b"year,loudness\n2001,-7.5\n"

#: The means alice's kernel tries, each a statement setting ``fs`` and ``p`` (the prefix of
#: store paths for that file system: none for the store's views, the bucket for s3fs's own).
MEANS: dict[str, str] = {
    "student_store()": "fs, p = student_store(), ''",
    "open_store(url)": (
        "fs, p = open_store(os.environ['SCALELAB_STORE_URL'], "
        "json.loads(os.environ['SCALELAB_STORE_OPTIONS'])), ''"
    ),
    "store.fs": "store.fs.invalidate_cache(); fs, p = store.fs, 'course/'",
    "JUPYTERHUB_USER=bob": ("os.environ['JUPYTERHUB_USER'] = 'bob'; fs, p = student_store(), ''"),
    "raw s3fs": (
        "fs, p = s3fs.S3FileSystem(skip_instance_cache=True, "
        "**json.loads(os.environ['SCALELAB_STORE_OPTIONS'])), 'course/'"
    ),
}
#: What alice tries through each means; the last but one is not cross-user.
OPERATIONS: dict[str, str] = {
    "read bob's file": "fs.cat_file(p + 'home/bob/secret.txt')",
    "list bob's home": "fs.ls(p + 'home/bob')",
    "write into bob's home": "fs.pipe_file(p + 'home/bob/planted.txt', b'x')",
    "delete bob's file": "fs.rm_file(p + 'home/bob/secret.txt')",
    "write into datasets/": "fs.pipe_file(p + 'datasets/planted.csv', b'x')",
    "copy bob's file into her home": (
        "fs.copy(p + 'home/bob/secret.txt', p + 'home/alice/stolen.txt')"
    ),
}
#: Operations written otherwise for one means. Posing as bob, alice copies his file as a thief
#: would: read through the posing view, write through her own (bob's view may not write hers).
SPELLED: dict[str, str] = {
    "JUPYTERHUB_USER=bob: copy bob's file into her home": (
        "data = fs.cat_file('home/bob/secret.txt'); os.environ['JUPYTERHUB_USER'] = 'alice'; "
        "student_store().pipe_file('home/alice/stolen.txt', data)"
    ),
}
#: (name, means' statement, operation's statement): each must raise PermissionError.
ATTEMPTS: list[tuple[str, str, str]] = [
    (f"{means}: {op}", setup, SPELLED.get(f"{means}: {op}", call))
    for means, setup in MEANS.items()
    for op, call in OPERATIONS.items()
]
#: The attempts the guard in alice's process refuses before any request (StoreAccessError):
#: everything through her own view, and a write to datasets/ through any view. SeaweedFS
#: answers every other one with a 403.
BY_THE_GUARD = {
    *(f"student_store(): {op}" for op in OPERATIONS),
    "JUPYTERHUB_USER=bob: write into datasets/",
}
CROSS_USER = [name for name, _, _ in ATTEMPTS if not name.endswith("write into datasets/")]

#: Runs in alice's kernel (its globals: ``store`` from the kernel's start-up): every attempt,
#: the bulk delete, then what alice may do; prints JSON.
PROBE = """
import json, os
import s3fs
from scalelab.store import open_store, student_store

def http_status(exc):
    for _ in range(8):
        if exc is None:
            return None
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            return response.get("ResponseMetadata", {{}}).get("HTTPStatusCode")
        exc = exc.__cause__ or exc.__context__
    return None

outcome, status, detail = {{}}, {{}}, {{}}
for name, setup, call in json.loads({attempts!r}):
    os.environ["JUPYTERHUB_USER"] = "alice"
    try:
        exec(setup)
        exec(call)
        outcome[name] = "LEAKED"
    except Exception as exc:
        outcome[name] = type(exc).__name__
        status[name] = http_status(exc)
        detail[name] = str(exc)[:200]
os.environ["JUPYTERHUB_USER"] = "alice"
raw = s3fs.S3FileSystem(
    skip_instance_cache=True, **json.loads(os.environ["SCALELAB_STORE_OPTIONS"])
)
try:
    raw.rm("course/home/bob/secret.txt")
    bulk = "returned"
except Exception as exc:
    bulk = type(exc).__name__
mine = student_store()
mine.pipe_file("home/alice/mine.txt", b"alice's")
mine.copy("datasets/demo/part.csv", "home/alice/part.csv")
allowed = {{
    "uid": os.getuid(),
    "kernel store": type(store).__name__,
    "kernel store root": sorted(store.ls("", detail=False)),
    "root": sorted(mine.ls("", detail=False)),
    "home": mine.ls("home", detail=False),
    "find": mine.find(""),
    "glob": mine.glob("*"),
    "store home": mine.cat_file("home/alice/mine.txt").decode(),
    "datasets": mine.cat_file("datasets/demo/part.csv").decode(),
    "copied data set": mine.cat_file("home/alice/part.csv").decode(),
    "raw own home": raw.cat_file("course/home/alice/mine.txt").decode(),
    "raw datasets": raw.cat_file("course/datasets/demo/part.csv").decode(),
}}
print(json.dumps({{
    "outcome": outcome, "status": status, "detail": detail, "bulk": bulk, "allowed": allowed
}}))
"""


def _admin(s3: SeaweedS3) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(skip_instance_cache=True, **s3.options(*ADMIN))


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    """The hub's base folder. Not pytest's tmp_path: pytest's own folder of the user's is 0700,
    which the students' users cannot enter (scalelab up would then run a single-user trial)."""
    folder = Path(tempfile.mkdtemp(prefix="scalelab-isolation-s3-"))
    folder.chmod(0o711)  # as /var/lib is: others may enter it
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def s3(base: Path) -> Iterator[SeaweedS3]:
    """SeaweedFS with an identity per student; bob's file and a data set, put with ops' key."""
    identities = {key: (secret, seaweedfs_actions(STORE, u)) for u, (key, secret) in KEYS.items()}
    folder = base / "seaweed"
    folder.mkdir(mode=0o700)
    server = SeaweedS3(folder, identities)
    try:
        server.start()
        admin = _admin(server)
        admin.mkdir(BUCKET)
        admin.pipe_file(f"{BUCKET}/home/bob/secret.txt", SECRET)
        admin.pipe_file(f"{BUCKET}/{DATASET}", DATA)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def hub(base: Path, s3: SeaweedS3) -> Iterator[ScaleLabUp]:
    """``scalelab up`` as root on the S3 store, each server with its student's own key; alice's
    and bob's servers running."""
    remove_users(KEYS)
    key_file = base / "store-keys.json"
    key_file.touch(mode=0o600)
    key_file.write_text(json.dumps({u: {"key": k, "secret": s} for u, (k, s) in KEYS.items()}))
    # ScaleLabUp has no --store parameter; the hub's store settings go in the operator's config.
    extra = (
        f"c.ScaleLabSpawner.store_url = {STORE!r}\n"
        f"c.ScaleLabSpawner.store_options = {s3.options(*ADMIN)!r}\n"
        "c.ScaleLabSpawner.store_identity_class = "
        "'scalelab.spawner.store_identity.S3KeyFile'\n"
        f"c.S3KeyFile.key_file = {str(key_file)!r}\n"
    )
    up = ScaleLabUp(base / "state", shared_identity=False, extra_config=extra, warm_spark=True)
    try:
        up.start()
        for user in KEYS:
            up.start_server(user)
        yield up
        assert up.interrupt() == 0
    finally:
        up.kill()
        remove_users(KEYS)


def _bobs_objects_unchanged(s3: SeaweedS3) -> None:
    admin = _admin(s3)
    admin.invalidate_cache()
    assert admin.find(f"{BUCKET}/home/bob") == [f"{BUCKET}/home/bob/secret.txt"]
    assert admin.cat_file(f"{BUCKET}/home/bob/secret.txt") == SECRET
    assert admin.find(f"{BUCKET}/datasets") == [f"{BUCKET}/{DATASET}"]
    assert admin.cat_file(f"{BUCKET}/{DATASET}") == DATA


@pytest.mark.asyncio
async def test_alices_kernel_cannot_reach_bobs_home_on_the_store(hub: ScaleLabUp, s3: SeaweedS3):
    assert "Each student runs as a system user of their own" in "".join(hub.output)
    kernel = hub.server_api("alice", "POST", "/kernels", json={"name": "scalelab-pyspark"})
    assert kernel.status_code == 201, kernel.text
    attempts = json.dumps(ATTEMPTS)
    out = await execute(hub, "alice", kernel.json()["id"], PROBE.format(attempts=attempts))
    assert out["error"] is None, out
    report = json.loads(out["stdout"].strip().splitlines()[-1])
    outcome, status = report["outcome"], report["status"]
    assert len(ATTEMPTS) == 30 and len(CROSS_USER) == 25 and len(outcome) == len(ATTEMPTS)
    # Every attempt raised PermissionError (StoreAccessError is one): nothing leaked.
    assert not {
        k: v for k, v in outcome.items() if v not in ("PermissionError", "StoreAccessError")
    }, report["detail"]
    # The guard refuses in alice's process, before any request; every other attempt reached
    # SeaweedFS, which answered 403.
    guard = {name for name, error in outcome.items() if error == "StoreAccessError"}
    assert guard == BY_THE_GUARD, report["detail"]
    by_server = {name: status.get(name) for name in outcome if name not in guard}
    assert len(by_server) == 23 and set(by_server.values()) == {403}, (by_server, report["detail"])
    assert len(set(by_server) & set(CROSS_USER)) == 20
    assert report["bulk"] == "returned"  # DeleteObjects: 200 with AccessDenied per key
    _bobs_objects_unchanged(s3)
    alice = pwd.getpwnam("jupyter-alice")
    assert report["allowed"] == {
        "uid": alice.pw_uid,
        "kernel store": "StudentStore",  # the kernel's start-up check passed with her key
        "kernel store root": ["datasets", "home"],
        "root": ["datasets", "home"],
        "home": ["home/alice"],
        "find": [DATASET, "home/alice/mine.txt", "home/alice/part.csv"],
        "glob": ["datasets", "home"],
        "store home": "alice's",
        "datasets": DATA.decode(),
        "copied data set": DATA.decode(),
        "raw own home": "alice's",
        "raw datasets": DATA.decode(),
    }
    assert sorted(_admin(s3).find(f"{BUCKET}/home/alice")) == [
        f"{BUCKET}/home/alice/mine.txt",
        f"{BUCKET}/home/alice/part.csv",
    ]  # no stolen.txt
    # Neither part of ops' admin identity is in any environment of a student's server or of
    # its kernels (the Spark driver's JVM included); each server has its own student's key.
    read: dict[str, list[str]] = {user: [] for user in KEYS}
    for user, (key, secret) in KEYS.items():
        server = server_process(hub, user)
        for proc in [server, *server.children(recursive=True)]:
            try:
                environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
                name = " ".join(proc.cmdline()[:3])
            except (ProcessLookupError, FileNotFoundError, psutil.NoSuchProcess):
                continue  # a short-lived helper (Spark's launcher scripts) already gone
            assert ADMIN[0].encode() not in environ, (user, name)
            assert ADMIN[1].encode() not in environ, (user, name)
            read[user].append(name)
        options = json.loads(server.environ()["SCALELAB_STORE_OPTIONS"])
        assert (options["key"], options["secret"]) == (key, secret)
    assert any("ipykernel" in name for name in read["alice"]), read  # her kernel was read too
    tree = server_process(hub, "alice").children(recursive=True)
    assert {p.uids().effective for p in tree} == {alice.pw_uid}


def test_the_course_store_drive_lists_the_root_with_alices_key(hub: ScaleLabUp, s3: SeaweedS3):
    """JupyterLab's drive lists the store root through the contents API, as the view shows it."""

    def names(path: str) -> list[str]:
        answer = hub.server_api("alice", "GET", f"/contents/{drive_id()}:{path}")
        assert answer.status_code == 200, answer.text
        return sorted(e["name"] for e in answer.json()["content"])

    assert names("") == ["datasets", "home"]
    assert names("home") == ["alice"]
    assert names("datasets") == ["demo"]
    refused = hub.server_api("alice", "GET", f"/contents/{drive_id()}:home/bob")
    assert refused.status_code in (400, 403, 404), refused.text
    assert "bob's secret" not in refused.text
    _bobs_objects_unchanged(s3)
