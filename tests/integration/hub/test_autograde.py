"""Autograding (issue 33, Must 3) as root, as on the course's hub: ``scalelab autograde`` runs a
lab's hidden tests on each collected version, one sandboxed run each (user ``nobody``, its own
network namespace, a cgroup with a memory limit, a private folder), and every bad notebook gets
a grade and a reason: an infinite loop, a kernel that ends itself, a memory hog, one that reads
another submission or reaches the network. A small lab keeps the suite fast; the real labs'
times per submission are ``bench/autograde_labs.py``'s."""

from __future__ import annotations

import copy
import csv
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest

from scalelab.hub_ext.labs.handin import stamp
from scalelab.hub_ext.labs.release import student_version

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")

ADD = "def add(a, b):\n    return a + b"
#: Code that keeps writing a result of its own wherever a run's result could be.
FORGES = (
    "import glob, subprocess\n"
    "script = 'while true; do for d in /tmp/scalelab-grade*; do "
    "echo forged > $d/executed.ipynb; echo forged > $d/stop.json; done; done'\n"
    "subprocess.Popen(['sh', '-c', script], start_new_session=True)\n"
)
MUL = "def mul(a, b):\n    return a * b"


def _code(cell_id: str, source: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.id = cell_id
    return cell


def _solution(answer: str) -> str:
    head, body = answer.split("\n", 1)
    return f"{head}\n    ### BEGIN SOLUTION\n{body}\n    ### END SOLUTION"


def _tests(visible: str, hidden: str) -> str:
    return f"{visible}\n### BEGIN HIDDEN TESTS\n{hidden}\n### END HIDDEN TESTS"


def _instructor() -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# A small lab"),
        _code("answer-add", _solution(ADD)),
        _code("test-add", _tests("assert add(1, 2) == 3", "assert add(-1, 1) == 0")),
        _code("answer-mul", _solution(MUL)),
        _code("test-mul", _tests("assert mul(2, 3) == 6", "assert mul(0, 5) == 0")),
    ]
    return notebook


def _answered(released: nbformat.NotebookNode, add: str, mul: str) -> nbformat.NotebookNode:
    notebook = copy.deepcopy(released)
    for cell in notebook.cells:
        if cell.get("id") == "answer-add":
            cell.source = add
        elif cell.get("id") == "answer-mul":
            cell.source = mul
        elif cell.get("id") == "test-mul":
            cell.source = "pass  # the student 'fixed' the test: overwritten by the grader's"
    return notebook


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("autograde")  # pytest's folder: 0700, root's
    instructor = base / "small_lab.ipynb"
    nbformat.write(_instructor(), instructor)
    released = student_version(_instructor())
    collected = base / "collected"
    listener = socket.socket()  # a service on the host's loopback, as the hub's API is
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    alice = collected / "alice"
    reads_alice = (
        f"import os\nd = {str(alice)!r}\n"
        "open(f'{d}/{os.listdir(d)[0]}/small_lab.ipynb').read()\n"
    )
    reaches = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
    submissions = {
        "alice": _answered(released, ADD, MUL),  # the reference answers: full marks
        "bob": released,  # handed in as released: nothing answered
        "carol": _answered(released, ADD, "while True:\n    pass"),
        "dave": _answered(released, ADD, reads_alice + MUL),
        "erin": _answered(released, ADD, "import os\nos._exit(3)"),
        "frank": _answered(released, ADD, "hog = b'x' * (2 << 30)\n" + MUL),
        "gina": _answered(released, reaches + ADD, MUL),
        "hank": _answered(released, ADD, FORGES + MUL),  # tries to write over its grade
    }  # fmt: skip
    rows = []
    for second, (user, notebook) in enumerate(submissions.items()):
        version = stamp(datetime(2027, 1, 15, 22, 0, second, tzinfo=UTC))
        (collected / user / version).mkdir(parents=True)
        nbformat.write(notebook, collected / user / version / "small_lab.ipynb")
        rows.append([user, 1, version, "", False, 0, "", 0])
    with (collected / "collected.csv").open("w") as handle:
        writer = csv.writer(handle)
        writer.writerow(["user", "version", "stamp", "submitted_at", "late", "bytes", "sha256",
                         "after_cutoff"])  # fmt: skip
        writer.writerows(rows)
    done = subprocess.run(
        [sys.executable, "-m", "scalelab", "autograde", str(collected), str(instructor),
         "--cell-timeout", "5", "--memory-mib", "512"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    listener.close()
    assert done.returncode == 0, done.stderr
    with (collected / "grades.csv").open() as handle:
        grades = {row["user"]: row for row in csv.DictReader(handle)}
    return collected, grades, done.stdout


def _cell(collected: Path, user: str, cell_id: str) -> dict:
    feedback = nbformat.read(collected / "feedback" / user / "small_lab.ipynb", as_version=4)
    return next(cell for cell in feedback.cells if cell.get("id") == cell_id)


def test_the_reference_answers_get_full_marks_and_the_released_version_none(graded):
    collected, grades, out = graded
    assert (grades["alice"]["points"], grades["alice"]["of"], grades["alice"]["failed"]) == (
        "2", "2", "0",
    )  # fmt: skip
    assert (grades["bob"]["points"], grades["bob"]["failed"]) == ("0", "2")
    assert "NotImplementedError" in grades["bob"]["reason"]
    assert "Graded 8 submission(s)" in out
    # The feedback notebook opens with the grade, and the hidden tests ran in it.
    first = nbformat.read(collected / "feedback/alice/small_lab.ipynb", as_version=4).cells[0]
    assert "**Autograded: 2 of 2 points.**" in first.source
    assert "assert mul(0, 5) == 0" in _cell(collected, "alice", "test-mul")["source"]


@pytest.mark.parametrize(
    "user, reason",
    [
        ("carol", "not run: timed out: a cell ran over 5 s, in cell 4 (id answer-mul)"),
        ("erin", "not run: the kernel died: the code ended it or crashed it, in cell 4"),
        ("frank", "not run: over the memory limit (512 MiB): the kernel was killed, in cell 4"),
        ("dave", "NameError: name 'mul' is not defined"),
    ],
)
def test_a_bad_notebook_gets_a_grade_and_its_reason(graded, user: str, reason: str):
    _collected, grades, _out = graded
    row = grades[user]
    assert (row["points"], row["failed"]) == ("1", "1"), row  # add still counts
    assert reason in row["reason"], row


def test_a_run_reads_no_other_submission_and_reaches_no_network(graded):
    collected, grades, _out = graded
    [error] = [o for o in _cell(collected, "dave", "answer-mul")["outputs"]
               if o["output_type"] == "error"]  # fmt: skip
    assert error["ename"] == "PermissionError", error  # another's hand-in: refused by the OS
    [error] = [o for o in _cell(collected, "gina", "answer-add")["outputs"]
               if o["output_type"] == "error"]  # fmt: skip
    assert error["ename"] in ("ConnectionRefusedError", "OSError"), error  # own namespace
    assert grades["gina"]["points"] == "1"  # the answer cell failed: add undefined


def test_solutions_or_submissions_the_runs_could_read_are_refused_first(tmp_path: Path):
    shared = Path(tempfile.mkdtemp(prefix="scalelab-open-"))  # /tmp: others may enter it
    try:
        shared.chmod(0o755)
        instructor = shared / "small_lab.ipynb"
        nbformat.write(_instructor(), instructor)
        instructor.chmod(0o644)
        (tmp_path / "collected.csv").write_text("user,version,stamp\n")
        done = subprocess.run(
            [sys.executable, "-m", "scalelab", "autograde", str(tmp_path), str(instructor)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 1
        assert f"{instructor} can be read by nobody" in done.stderr
        assert f"chmod 700 {shared}" in done.stderr and "Traceback" not in done.stderr
        assert not (tmp_path / "grades.csv").exists()
    finally:
        shutil.rmtree(shared)


def test_a_run_cannot_write_over_its_own_grade(graded):
    _collected, grades, _out = graded
    assert (grades["hank"]["points"], grades["hank"]["reason"]) == ("2", "")
