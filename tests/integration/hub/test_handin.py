"""Hand-in (issue 33, Must 2) on a real hub: ``scalelab submit`` from a student's server, the
hub's API keeping every version in the course store, receipts, deadlines, and refusals that
keep nothing and change nothing. The JupyterLab Course menu's hand-in is not built yet."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import requests

from tests.support.hubproc import ScaleLabUp, get_as, running, server_environ

OPS_PASSWORD = "ops-" + "z" * 40
LAB1 = "lab1_millionsong_regression"
LAB2 = "lab2_fashion_mnist_convnet"
LAB4 = "lab4_the_course_s_own"  # released into the servers' SCALELAB_LABS_DIR, no deadline
DEADLINES = (
    "c.HandIn.deadlines = {\n"
    f"    {LAB1!r}: '2000-01-01T00:00:00+00:00',\n"  # long past: a hand-in is late
    f"    {LAB2!r}: '2999-01-01T00:00:00+01:00',\n"
    "    'project': '2999-06-30T23:59:00+02:00',\n"  # a lab the course adds by its deadline
    "}\n"
    "c.HandIn.max_versions = 3\n"
    "c.Authenticator.admin_users = {'ops'}\n"  # the course's instructor
    f"c.SharedPasswordAuthenticator.admin_password = {OPS_PASSWORD!r}\n"
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    state = tmp_path_factory.mktemp("handin") / "state"
    labs = state.parent / "labs"  # the course's own released labs, given to the servers
    labs.mkdir()
    _notebook(labs, f"{LAB4}.ipynb", "# your answer")
    environment = f"c.Spawner.environment = {{'SCALELAB_LABS_DIR': {str(labs)!r}}}\n"
    up = ScaleLabUp(state, extra_config=DEADLINES + environment)
    with running(up):
        up.start_server("alice")
        assert up.api("POST", "/users/bob").status_code == 201
        yield up


def _notebook(tmp_path: Path, name: str, answer: str) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# Lab"), nbformat.v4.new_code_cell(answer)]
    path = tmp_path / name
    path.write_text(nbformat.writes(notebook))
    return path


def _cli(
    hub: ScaleLabUp, *args: str, cwd: Path, user: str = "alice"
) -> subprocess.CompletedProcess:
    """``scalelab <args>`` in a terminal of ``user``'s server (its environment, its token)."""
    env = {k: v for k, v in server_environ(hub, user).items() if not k.startswith("PYTEST")}
    env["PATH"] = os.environ["PATH"]
    return subprocess.run(
        [sys.executable, "-m", "scalelab", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _versions(hub: ScaleLabUp, lab: str, user: str = "alice") -> list[Path]:
    folder = hub.state_dir / "store" / "submissions" / lab / user
    return sorted(folder.iterdir()) if folder.exists() else []


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_student_hands_in_twice_and_both_versions_stay(hub: ScaleLabUp, tmp_path: Path):
    first = _notebook(tmp_path, f"{LAB2}.ipynb", "answer = 1")
    done = _cli(hub, "submit", LAB2, cwd=tmp_path)  # <lab>.ipynb in the current folder
    assert done.returncode == 0, done.stderr
    assert f"Handed in: {LAB2} version 1" in done.stdout
    assert "on time (deadline 2998-12-31 23:00 UTC)" in done.stdout  # +01:00 shown in UTC
    [v1] = _versions(hub, LAB2)
    assert _sha(v1 / f"{LAB2}.ipynb") == _sha(first)  # byte for byte
    receipt = json.loads((v1 / "receipt.json").read_text())
    assert receipt["version"] == 1 and receipt["late"] is False and receipt["cells"] == 2
    assert receipt["sha256"] == _sha(first) and receipt["user"] == "alice"

    second = _notebook(tmp_path / "..", "elsewhere.ipynb", "answer = 2")
    again = _cli(hub, "submit", LAB2, str(second), "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["version"] == 2
    kept = _versions(hub, LAB2)
    assert len(kept) == 2 and kept[0] == v1
    assert _sha(v1 / f"{LAB2}.ipynb") == _sha(first)  # the first version is untouched
    assert _sha(kept[1] / f"{LAB2}.ipynb") == _sha(second)

    # Only the hub's user reaches the folder of the versions (0700 on a local store).
    submissions = hub.state_dir / "store" / "submissions"
    assert submissions.stat().st_mode & 0o777 == 0o700
    assert submissions.stat().st_uid == os.getuid()


def test_after_the_deadline_a_hand_in_is_kept_and_marked_late(hub: ScaleLabUp, tmp_path: Path):
    path = _notebook(tmp_path, "mine.ipynb", "late = True")
    done = _cli(hub, "submit", f"{LAB1}.ipynb", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "LATE (deadline 2000-01-01 00:00 UTC)" in done.stdout
    listing = _cli(hub, "submissions", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert any(line.startswith(f"{LAB1} version 1") and "LATE" in line for line in lines)
    assert sum(line.startswith(f"{LAB2} version") for line in lines) >= 1


def test_a_student_reads_and_hands_in_only_as_themselves(hub: ScaleLabUp, tmp_path: Path):
    token = hub.api("POST", "/users/bob/tokens", json={"note": "bob's own"}).json()["token"]
    as_bob = {"Authorization": f"token {token}"}
    base = f"{hub.url}/hub/api/scalelab/users"
    nb = _notebook(tmp_path, "x.ipynb", "x = 1").read_bytes()
    before = _versions(hub, LAB2)
    # JupyterHub answers 404 for a user the token may not see (it does not tell who exists).
    looked = requests.get(f"{base}/alice/submissions", headers=as_bob, timeout=30)
    assert looked.status_code == 404 and LAB2 not in looked.text
    refused = requests.post(f"{base}/alice/submissions/{LAB2}", data=nb, headers=as_bob, timeout=30)
    assert refused.status_code == 404
    assert _versions(hub, LAB2) == before
    own = requests.get(f"{base}/bob/submissions", headers=as_bob, timeout=30)
    assert own.status_code == 200 and own.json() == {"submissions": []}
    # The course's own project (named by its deadline) takes hand-ins too.
    project = requests.post(f"{base}/bob/submissions/project", data=nb, headers=as_bob, timeout=30)
    assert project.status_code == 201, project.text
    assert project.json()["path"].startswith("submissions/project/bob/")
    # So does a lab released into the servers' labs folder, with no deadline.
    own_lab = requests.post(f"{base}/bob/submissions/{LAB4}", data=nb, headers=as_bob, timeout=30)
    assert own_lab.status_code == 201, own_lab.text
    assert own_lab.json()["deadline"] is None and own_lab.json()["late"] is False


@pytest.mark.parametrize(
    "content, lab, said",
    [
        (b'{"cells": [', LAB2, "its JSON breaks at line 1"),
        (b'{"cells": []}', LAB2, "not a valid notebook"),
        (b"", LAB2, "the notebook is empty"),
        (b"\xff\xfe", LAB2, "not UTF-8"),
        (None, "lab9_no_such_lab", "the course has no lab 'lab9_no_such_lab'"),
        (None, "..%2F..%2Fhome", "does not name a lab"),
    ],
)
def test_a_bad_hand_in_is_refused_by_name_and_keeps_nothing(
    hub: ScaleLabUp, tmp_path: Path, content: bytes | None, lab: str, said: str
):
    store = hub.state_dir / "store"
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    path = tmp_path / "bad.ipynb"
    path.write_bytes(
        content if content is not None else _notebook(tmp_path, "ok", "1").read_bytes()
    )
    done = _cli(hub, "submit", lab, str(path), cwd=tmp_path)
    assert done.returncode == 1
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before


def test_outside_a_course_server_the_command_says_where_to_run_it(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTERHUB_")}
    done = subprocess.run(
        [sys.executable, "-m", "scalelab", "submit", LAB1],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "open a terminal in your JupyterLab on the course hub" in done.stderr


def test_past_the_course_s_bound_on_versions_one_more_is_refused(hub: ScaleLabUp, tmp_path: Path):
    path = _notebook(tmp_path, "again.ipynb", "again = True")
    for version in (1, 2, 3):
        done = _cli(hub, "submit", LAB4, str(path), "--json", cwd=tmp_path)
        assert done.returncode == 0 and json.loads(done.stdout)["version"] == version, done.stderr
    refused = _cli(hub, "submit", LAB4, str(path), cwd=tmp_path)
    assert refused.returncode == 1
    assert f"you have handed in {LAB4} 3 times, the course's limit" in refused.stderr
    assert len(_versions(hub, LAB4)) == 3


def _collect(hub: ScaleLabUp, tmp_path: Path, *args: str, token: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTERHUB_")}
    env["SCALELAB_HUB_TOKEN"] = token or hub.token  # the tests' service: a hub admin
    return subprocess.run(
        [sys.executable, "-m", "scalelab", "collect", *args, "--hub", hub.url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _table(path: Path) -> list[dict]:
    import csv

    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_an_instructor_collects_the_latest_or_the_version_before_a_time(
    hub: ScaleLabUp, tmp_path: Path
):
    latest = _collect(hub, tmp_path, LAB2)
    assert latest.returncode == 0, latest.stderr
    assert f"Collected {LAB2} from 1 of 1 student(s) into collected/{LAB2}" in latest.stdout
    [row] = _table(tmp_path / "collected" / LAB2 / "collected.csv")
    assert (row["user"], row["version"], row["late"], row["after_cutoff"]) == (
        "alice",
        "2",
        "False",
        "0",
    )
    v1, v2 = _versions(hub, LAB2)
    copied = tmp_path / "collected" / LAB2 / "alice" / v2.name / f"{LAB2}.ipynb"
    assert copied.read_bytes() == (v2 / f"{LAB2}.ipynb").read_bytes()

    first = json.loads((v1 / "receipt.json").read_text())
    before = _collect(hub, tmp_path, LAB2, "--before", first["submitted_at"], "--to", "at-v1")
    assert before.returncode == 0, before.stderr
    [row] = _table(tmp_path / "at-v1" / "collected.csv")
    assert (row["version"], row["stamp"], row["after_cutoff"]) == ("1", v1.name, "1")

    # Lab 1's deadline is long past and alice handed in after it: nothing to collect for her.
    due = _collect(hub, tmp_path, LAB1, "--before", "deadline", "--to", "lab1")
    assert due.returncode == 0, due.stderr
    assert "from 0 of 1 student(s)" in due.stdout and "1 with versions after" in due.stdout
    [row] = _table(tmp_path / "lab1" / "collected.csv")
    assert (row["user"], row["version"], row["after_cutoff"]) == ("alice", "", "1")
    assert sorted(p.name for p in (tmp_path / "lab1").iterdir()) == ["collected.csv"]


def test_only_an_admin_collects_and_a_student_downloads_only_her_own(
    hub: ScaleLabUp, tmp_path: Path
):
    alice = server_environ(hub, "alice")["JUPYTERHUB_API_TOKEN"]
    refused = _collect(hub, tmp_path, LAB2, token=alice)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "scalelab: error:" in refused.stderr and "admin:users" in refused.stderr
    assert not (tmp_path / "collected").exists()
    [v1, _v2] = _versions(hub, LAB2)
    url = f"{hub.url}/hub/api/scalelab/users/alice/submissions/{LAB2}/{v1.name}"
    own = requests.get(url, headers={"Authorization": f"token {alice}"}, timeout=30)
    assert own.status_code == 200 and own.content == (v1 / f"{LAB2}.ipynb").read_bytes()
    for missing in ("latest", "20000101T000000.000000Z"):  # no stamp; no such version
        bad = requests.get(
            url[: -len(v1.name)] + missing, headers={"Authorization": f"token {alice}"}, timeout=30
        )
        assert bad.status_code == 404 and "alice has no version" in bad.json()["message"]


def test_feedback_returned_by_an_instructor_reaches_only_its_student(
    hub: ScaleLabUp, tmp_path: Path
):
    from scalelab.commands.handin import return_all

    graded = tmp_path / "graded"
    (graded / "feedback" / "alice").mkdir(parents=True)
    feedback = _notebook(graded / "feedback" / "alice", f"{LAB2}.ipynb", "# 2 of 2 points")
    alice = server_environ(hub, "alice")["JUPYTERHUB_API_TOKEN"]
    base = f"{hub.url}/hub/api/scalelab/users/alice/feedback/{LAB2}"
    # A student cannot return feedback, not even to herself.
    forged = requests.put(base, data=b"{}", headers={"Authorization": f"token {alice}"}, timeout=30)
    assert forged.status_code == 403, forged.text
    none_yet = _cli(hub, "feedback", LAB2, cwd=tmp_path)
    assert none_yet.returncode == 0 and f"No feedback on {LAB2} yet." in none_yet.stdout

    env = {"SCALELAB_HUB_TOKEN": hub.token}
    assert return_all(graded, LAB2, env, hub_url=hub.url) == ["alice"]
    kept = hub.state_dir / "store" / "feedback"
    assert kept.stat().st_mode & 0o777 == 0o700
    assert (kept / LAB2 / "alice" / f"{LAB2}.ipynb").read_bytes() == feedback.read_bytes()

    home = hub.state_dir / "homes" / "alice"
    got = _cli(hub, "feedback", LAB2, cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    placed = home / f"{LAB2}-feedback.ipynb"
    assert f"Your feedback on {LAB2}: {placed}" in got.stdout
    assert placed.read_bytes() == feedback.read_bytes()
    placed.write_text("the student's own notes")  # she edits it: never overwritten
    again = _cli(hub, "feedback", LAB2, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert placed.read_text() == "the student's own notes"
    assert (home / f"{LAB2}-feedback (2).ipynb").read_bytes() == feedback.read_bytes()


def test_the_hand_in_page_refuses_a_lab_of_no_course_by_name(hub: ScaleLabUp):
    def post(**form: str) -> requests.Response:
        return requests.post(
            f"{hub.url}/user/alice/scalelab/handin",
            data=form,
            headers=hub.auth,
            timeout=60,
        )

    page = requests.get(f"{hub.url}/user/alice/scalelab/handin", headers=hub.auth, timeout=60)
    assert page.status_code == 200 and f'id="lab-{LAB4}"' in page.text
    nope = post(lab="../nope")
    assert nope.status_code == 400 and "&#39;../nope&#39; is not one of the course" in nope.text
    none_yet = post(lab=LAB1, action="feedback")
    assert none_yet.status_code == 200 and f"No feedback on {LAB1} yet." in none_yet.text


def test_the_instructors_view_lists_every_student_and_a_csv(hub: ScaleLabUp):
    import csv

    page = get_as(hub, "ops", OPS_PASSWORD, "/hub/scalelab/submissions", params={"lab": LAB2})
    assert page.status_code == 200, page.text
    assert LAB1 in page.text and "project" in page.text  # the labs: deadlines and hand-ins
    alice_row = page.text.split('id="row-alice"')[1].split("</tr>")[0]
    assert "<td>2</td>" in alice_row and "on time" in alice_row
    bob_row = page.text.split('id="row-bob"')[1].split("</tr>")[0]
    assert "not handed in" in bob_row  # bob handed in other labs, not this one
    query = {"lab": LAB1, "format": "csv"}
    table = get_as(hub, "ops", OPS_PASSWORD, "/hub/scalelab/submissions", params=query)
    assert table.headers["Content-Type"].startswith("text/csv"), table.text
    rows = {row["user"]: row for row in csv.DictReader(io.StringIO(table.text))}
    assert (rows["alice"]["versions"], rows["alice"]["latest"], rows["alice"]["late"]) == (
        "1", "1", "True",
    )  # fmt: skip
    assert (rows["bob"]["versions"], rows["bob"]["submitted_at"]) == ("0", "")
    assert "ops" not in rows  # an admin is no student
    refused = get_as(hub, "alice", hub.password, "/hub/scalelab/submissions")
    assert refused.status_code == 403 and 'id="row-bob"' not in refused.text
