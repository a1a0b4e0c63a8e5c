"""``scalelab end-of-term`` as an operator runs it, as root: a hub database made by JupyterHub's
own ORM, students with real system users (``useradd``, as the spawner makes them), homes and a
local course store; a dry run, a refusal while the hub's port answers, the real run, an
archive that is never overwritten, and a rerun.

The pure part (who, and what of each): ``tests/unit/test_retire_plan.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from jupyterhub import orm

from scalelab.common.ports import free_port
from scalelab.spawner.system_users import ensure_system_user
from tests.support.sysusers import MARKS, remove_users

pytestmark = MARKS[:1]  # root; the students' users never run anything here

#: ann: a system user ScaleLab made; bob: a home under home_root only; dan: an archive exists
#: already; carol: an admin, never retired. Names unique to this file (system users are global).
ANN, BOB, DAN, CAROL = "eot-ann", "eot-bob", "eot-dan", "eot-carol"


def _hub_users(db_url: str) -> dict[str, list[str]]:
    db = orm.new_session_factory(db_url)()
    try:
        return {u.name: sorted(g.name for g in u.groups) for u in db.query(orm.User)}
    finally:
        db.close()


@pytest.fixture
def course(tmp_path: Path):
    """The state of a course at the end of term, and how to run the command on it."""
    remove_users([ANN])
    state, homes, store = tmp_path / "state", tmp_path / "homes", tmp_path / "store"
    db_url = f"sqlite:///{tmp_path / 'jupyterhub.sqlite'}"
    db = orm.new_session_factory(db_url)()
    group = orm.Group(name="course-2026")
    db.add(group)
    for name in (ANN, BOB, DAN, CAROL):
        user = orm.User(name=name, admin=name == CAROL)
        user.groups.append(group)
        db.add(user)
    db.commit()
    db.close()
    entry = ensure_system_user(f"jupyter-{ANN}", str(homes / ANN))
    for name in (ANN, BOB, DAN):
        (homes / name / "deep").mkdir(parents=True)
        (homes / name / "lab1.ipynb").write_text(f'{{"by": "{name}"}}')
        (homes / name / "deep" / "weights.bin").write_bytes(os.urandom(4096))
    (homes / ANN / "shadow").symlink_to("/etc/shadow")  # archived as a link, never read
    os.chown(homes / ANN, entry.pw_uid, entry.pw_gid)
    for name in (ANN, BOB, DAN, CAROL):
        (store / "home" / name / "runs").mkdir(parents=True)
        (store / "home" / name / "runs" / "metrics.csv").write_text(f"epoch,loss\n1,{name}\n")
    (tmp_path / "archive" / DAN).mkdir(parents=True)
    port = free_port()
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(
        f"c.JupyterHub.db_url = {db_url!r}\n"
        f"c.JupyterHub.port = {port}\n"
        f"c.ScaleLabSpawner.home_root = {str(homes)!r}\n"
        f"c.ScaleLabSpawner.store_url = {store.as_uri()!r}\n"
    )
    config.chmod(0o600)

    def run(*args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "scalelab", "end-of-term", "--state-dir", str(state)]
        argv += ["--config", str(config), "--archive", str(tmp_path / "archive"), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    yield {"run": run, "db_url": db_url, "homes": homes, "store": store, "port": port}
    remove_users([ANN])


def test_a_dry_run_names_every_student_and_changes_nothing(course: dict):
    done = course["run"]("--dry-run")
    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    ann = next(line for line in lines if line.startswith(f"{ANN}:"))
    assert f"home {course['homes'] / ANN}" in ann and f"system user jupyter-{ANN}" in ann
    assert f"store home/{ANN}" in ann and f"hub user {ANN}" in ann
    assert any(line.startswith(f"{BOB}: would archive and remove home ") for line in lines)
    assert not any(line.startswith(f"{CAROL}:") for line in lines)  # an admin
    assert lines[-1] == "dry run: 3 students, nothing was changed"
    assert set(_hub_users(course["db_url"])) == {ANN, BOB, DAN, CAROL}
    assert pwd.getpwnam(f"jupyter-{ANN}").pw_dir == str(course["homes"] / ANN)
    assert (course["homes"] / ANN / "lab1.ipynb").exists()
    assert (course["store"] / "home" / BOB / "runs" / "metrics.csv").exists()
    assert not (course["homes"].parent / "archive" / ANN).exists()


def test_the_end_of_term_waits_for_the_hub_to_stop(course: dict):
    with socket.create_server(("127.0.0.1", course["port"])):  # the hub's public port answers
        done = course["run"]()
    assert done.returncode == 2, done
    assert f"something answers on the hub's address 127.0.0.1:{course['port']}" in done.stderr
    assert "stop it first" in done.stderr and "Traceback" not in done.stderr
    assert set(_hub_users(course["db_url"])) == {ANN, BOB, DAN, CAROL}
    assert (course["homes"] / ANN / "lab1.ipynb").exists()


def test_students_are_archived_then_retired_and_nothing_is_lost(course: dict):
    homes, store, archive = course["homes"], course["store"], course["homes"].parent / "archive"
    notebook = (homes / ANN / "lab1.ipynb").read_bytes()
    weights = (homes / ANN / "deep" / "weights.bin").read_bytes()
    done = course["run"]()
    assert done.returncode == 1, done  # dan's archive exists: dan is not retired
    assert f"{DAN}: skipped, {archive / DAN} exists" in done.stdout
    assert done.stdout.splitlines()[-1] == "2 of 3 students retired, 1 not (see above)"
    # What went: ann's and bob's homes, store homes, ann's system user, both hub users.
    assert set(_hub_users(course["db_url"])) == {DAN, CAROL}
    assert not (homes / ANN).exists() and not (homes / BOB).exists()
    assert not (store / "home" / ANN).exists() and not (store / "home" / BOB).exists()
    with pytest.raises(KeyError):
        pwd.getpwnam(f"jupyter-{ANN}")
    # What stayed: dan (everything) and carol, the admin.
    assert (homes / DAN / "lab1.ipynb").read_text() == f'{{"by": "{DAN}"}}'
    assert (store / "home" / DAN / "runs" / "metrics.csv").exists()
    assert (store / "home" / CAROL / "runs" / "metrics.csv").exists()
    # ann's archive: private, whole, the link kept as a link, the manifest's checksums true.
    folder = archive / ANN
    assert folder.stat().st_mode & 0o777 == 0o700
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["system_user"] == f"jupyter-{ANN}" and manifest["user"] == ANN
    with tarfile.open(folder / "home.tar.gz") as tar:
        assert tar.extractfile("home/lab1.ipynb").read() == notebook
        assert tar.extractfile("home/deep/weights.bin").read() == weights
        link = tar.getmember("home/shadow")
        assert link.issym() and link.linkname == "/etc/shadow"
        assert manifest["home"]["entries"] == len(tar.getmembers()) == 5
    with tarfile.open(folder / "store-home.tar.gz") as tar:
        metrics = tar.extractfile("store-home/runs/metrics.csv").read()
        assert metrics == f"epoch,loss\n1,{ANN}\n".encode()
    for part, name in (("home", "home.tar.gz"), ("store_home", "store-home.tar.gz")):
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert manifest[part]["sha256"] == digest
    # A rerun finds dan only (still refused), and the admin is never a student.
    again = course["run"]()
    assert again.returncode == 1 and again.stdout.splitlines()[-1].startswith("0 of 1 students")
    admin = course["run"]("--user", CAROL)
    assert admin.returncode == 2 and f"{CAROL} is an admin" in admin.stderr, admin
    assert set(_hub_users(course["db_url"])) == {DAN, CAROL}
