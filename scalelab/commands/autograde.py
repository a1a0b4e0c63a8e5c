"""``scalelab autograde``: grade the collected versions of a lab by running the instructor's
hidden tests on each, one sandboxed, resource-limited, timed-out run per submission, then write
``grades.csv`` and a feedback notebook per student.

The sandbox (when run by root, as on the course's hub): each run's kernel, which runs the
student's code, is a process of its own user (``nobody`` by default), in a private folder that
holds only its notebook; the run (nbclient, :mod:`scalelab.commands.grade_run`) and its kernel
are in a network namespace of their own (only its loopback: no hub, no store, no other student)
and a cgroup with a memory and a task limit (killed whole at the end). The run stays root and
writes its result where the kernel's user cannot, so the student's code cannot write over its
grade. The collected folder and the instructor's notebook stay out of its reach (keep them
0700: the command checks). Without root, runs are timed out only, and
the command says so. Pure parts: :mod:`scalelab.hub_ext.labs.autograde`.
Why: docs/design-notes.md, scalelab.hub_ext.labs.autograde.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat

from scalelab.commands.grade_run import setpriv
from scalelab.common.memory_cgroup import read_memory_events
from scalelab.hub_ext.labs.autograde import (
    CellGrade,
    Stop,
    feedback_notebook,
    grade,
    graded_cells,
    grading_notebook,
)
from scalelab.hub_ext.labs.release import cell_label
from scalelab.spawner.cgroups import join as join_cgroup

#: The columns of ``grades.csv``, one row per graded submission.
COLUMNS = ("user", "stamp", "points", "of", "failed", "reason")
#: Seconds the run is given after its own limit before it is killed (it writes what it ran).
GRACE_S = 30.0


class AutogradeFailed(Exception):
    """Nothing was graded: the message says why (no collected table, a bad instructor notebook)."""


@dataclass(frozen=True)
class Sandbox:
    """How each run is contained: ``user`` it runs as (root only), ``memory_bytes`` and
    ``tasks`` of its cgroup (root only), ``cell_timeout_s`` per cell and ``run_timeout_s`` for
    the whole notebook (seconds)."""

    user: str = "nobody"
    memory_bytes: int = 4 << 30
    tasks: int = 512
    cell_timeout_s: float = 300.0
    run_timeout_s: float = 1800.0


def _is_root() -> bool:
    return os.geteuid() == 0


def _argv(folder: Path, out: Path, sandbox: Sandbox) -> list[str]:
    run = [sys.executable, "-m", "scalelab.commands.grade_run", str(folder), str(out)]
    run.append(str(sandbox.cell_timeout_s))
    if not _is_root():
        return run
    entry = pwd.getpwnam(sandbox.user)
    run += [str(entry.pw_uid), str(entry.pw_gid)]  # the kernel's user; the run stays root
    # A network namespace of its own, its loopback up (a kernel and a Spark driver use it).
    script = 'ip link set lo up && exec "$@"'
    return ["unshare", "--net", "--", "sh", "-c", script, "sh", *run]


def _environment(folder: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "JUPYTER_PATH", "JAVA_HOME", "SPARK_HOME")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    tmp = folder / "tmp"
    env.update(HOME=str(folder), TMPDIR=str(tmp), JUPYTER_RUNTIME_DIR=str(folder / "runtime"))
    return env


def _cgroup(name: str, sandbox: Sandbox):
    if not _is_root():
        return None
    from scalelab.spawner.cgroups import CgroupError, ServerCgroup, limits_of

    try:
        group = ServerCgroup("scalelab-grading", name)
        group.create(limits_of(sandbox.memory_bytes, None, sandbox.tasks))
    except CgroupError:
        return None
    return group


def run_submission(
    notebook: nbformat.NotebookNode, name: str, sandbox: Sandbox
) -> tuple[nbformat.NotebookNode, dict | None]:
    """Run ``notebook`` in a sandbox of its own (see the module docstring); the executed
    notebook (what ran of it) and what stopped the run (``{"reason"}``) or None."""
    folder = Path(tempfile.mkdtemp(prefix="scalelab-grade-"))  # the kernel's
    out = Path(tempfile.mkdtemp(prefix="scalelab-graded-"))  # the run's result: root's, 0700
    group = _cgroup(name, sandbox)
    process: subprocess.Popen | None = None
    try:
        for sub in ("tmp", "runtime"):
            (folder / sub).mkdir(mode=0o700)
        nbformat.write(notebook, folder / "grading.ipynb")
        if _is_root():
            entry = pwd.getpwnam(sandbox.user)
            for path in (folder, *folder.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        join = group.join_paths() if group is not None else []
        process = subprocess.Popen(
            _argv(folder, out, sandbox),
            cwd=folder,
            env=_environment(folder),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=(lambda: join_cgroup(join)) if join else None,
        )
        try:
            process.wait(timeout=sandbox.run_timeout_s + GRACE_S)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        memory = read_memory_events(group.memory_path) if group is not None else None
        # Everything the run started ends before its result is read: a process the student's
        # code left behind cannot write over it any more.
        if group is not None:
            group.end()
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        if timed_out:
            stop = {"reason": f"timed out: the notebook ran over {sandbox.run_timeout_s:g} s"}
        else:
            stop = read_stop(out / "stop.json")
        if stop is not None and memory is not None:
            if memory.oom_kills:
                limit = (memory.limit_bytes or sandbox.memory_bytes) >> 20
                reason = f"over the memory limit ({limit} MiB): the kernel was killed"
                stop = {**stop, "reason": reason}
            elif stop["reason"].startswith("the kernel died"):
                stop = {**stop, "reason": "the kernel died: the code ended it or crashed it"}
        executed, problem = read_executed(out / "executed.ipynb", notebook)
        if problem is not None:
            stop = {"reason": problem}
        return executed, stop
    finally:
        if group is not None:
            group.end()  # whatever the run left, killed (again, if it failed half-way)
        elif process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


#: Bytes of a run's executed notebook read back, at most (the student's outputs included).
MAX_EXECUTED_BYTES = 256 << 20


def read_stop(path: Path) -> dict | None:
    """The run's ``stop.json`` (written in the sandbox, so checked): None (it ran to its end),
    or ``{"reason": str, "index": int}``; a missing or malformed one is a stop of its own."""
    try:
        stop = json.loads(path.read_text())
    except FileNotFoundError:
        return {"reason": "the run ended without its result (killed: memory or tasks)"}
    except (OSError, ValueError):
        return {"reason": "the run's result was unreadable (the notebook's code wrote over it)"}
    if stop is None:
        return None
    if (
        not isinstance(stop, dict)
        or not isinstance(stop.get("reason"), str)
        or not isinstance(stop.get("index", 0), int)
    ):
        return {"reason": "the run's result was unreadable (the notebook's code wrote over it)"}
    return {"reason": stop["reason"][:300], "index": stop.get("index", 0)}


def read_executed(
    path: Path, fallback: nbformat.NotebookNode
) -> tuple[nbformat.NotebookNode, str | None]:
    """The run's executed notebook (written in the sandbox, so checked), or ``fallback`` (the
    notebook as it was to run: nothing counts as run) and why."""
    try:
        if path.stat().st_size > MAX_EXECUTED_BYTES:
            return fallback, f"the run's notebook is over {MAX_EXECUTED_BYTES >> 20} MiB"
        executed = nbformat.read(path, as_version=4)
    except FileNotFoundError:
        return fallback, None
    except (OSError, ValueError) as exc:
        return fallback, f"the run's notebook was unreadable ({type(exc).__name__})"
    ids = [cell.get("id") for cell in executed.cells]
    if ids != [cell.get("id") for cell in fallback.cells]:
        return fallback, "the run's notebook is not the one that ran (its cells differ)"
    return executed, None


def readable_by(user: str, path: Path) -> bool:
    """Whether ``user`` (a system user; the caller is root) can read ``path``, or enter it if
    it is a folder: asked of the kernel itself, by a process of that user (``setpriv``,
    ``test``)."""
    entry = pwd.getpwnam(user)
    test = ["test", "-r", str(path), "-o", "-d", str(path), "-a", "-x", str(path)]
    done = subprocess.run([*setpriv(entry.pw_uid, entry.pw_gid), *test], check=False, timeout=60)
    return done.returncode == 0


def _stop_at(executed: nbformat.NotebookNode, stop: dict | None) -> Stop | None:
    """Where the run stopped: the cell that was running (the run says which; a run killed
    from outside does not: the last cell that started), its label in the reason."""
    if stop is None:
        return None
    started = [
        index
        for index, cell in enumerate(executed.cells)
        if cell.cell_type == "code" and cell.get("execution_count") is not None
    ]
    if "index" not in stop and not started:
        return Stop(0, stop["reason"])  # nothing is known to have run
    index = stop.get("index", started[-1] if started else 0)
    label = cell_label(index, executed.cells[index].get("id")) if executed.cells else "cell 1"
    return Stop(index, f"{stop['reason']}, in {label}")


def autograde(
    collected: Path,
    instructor: Path,
    sandbox: Sandbox = Sandbox(),
    log: Callable[[str], None] = print,
) -> tuple[list[tuple[str, str, list[CellGrade]]], Path]:
    """Grade every version listed in ``collected/collected.csv`` (``scalelab collect``'s)
    against ``instructor`` (the lab's instructor notebook, hidden tests in); write
    ``collected/grades.csv`` (:data:`COLUMNS`) and ``collected/feedback/<user>/<lab>.ipynb``.

    Returns
    -------
    (results, path)
        ``(user, stamp, cell grades)`` per submission, and the CSV's path.

    Raises
    ------
    AutogradeFailed
        No ``collected.csv``, or the instructor's notebook cannot be read or has no graded
        cells.
    """
    table = collected / "collected.csv"
    if not table.is_file():
        raise AutogradeFailed(f"no {table}: run `scalelab collect <lab> --to {collected}` first")
    try:
        source = nbformat.read(instructor, as_version=4)
        graded = graded_cells(source)
        kernelspec = dict(source.metadata.get("kernelspec", {}))  # the lab's, not the student's
    except (OSError, ValueError) as exc:
        raise AutogradeFailed(f"cannot read the graded cells of {instructor}: {exc}") from None
    if not graded:
        raise AutogradeFailed(f"{instructor} has no cell with ### BEGIN HIDDEN TESTS to grade")
    lab = instructor.stem
    if not _is_root():
        log("scalelab: not root: each run is timed out but not sandboxed (run as root to be)")
    else:
        for path in (instructor, collected):
            if readable_by(sandbox.user, path):
                raise AutogradeFailed(
                    f"{path} can be read by {sandbox.user}, the user the students' code runs "
                    "as: it would read the solutions or the other submissions. Make it (or a "
                    f"folder above it) private first: chmod 700 {path.parent}"
                )
    with table.open() as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("stamp")]
    results = []
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    for row in rows:
        user, stamp = row["user"], row["stamp"]
        submission = nbformat.read(collected / user / stamp / f"{lab}.ipynb", as_version=4)
        notebook, missing = grading_notebook(submission, graded, kernelspec)
        executed, stop = run_submission(notebook, f"{user}-{stamp}".replace(".", "-"), sandbox)
        grades = grade(executed, graded, missing, _stop_at(executed, stop))
        feedback = collected / "feedback" / user / f"{lab}.ipynb"
        feedback.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(feedback_notebook(executed, grades, lab), feedback)
        earned, total = sum(g.points for g in grades), sum(g.of for g in grades)
        failed = [g for g in grades if g.points < g.of]
        reasons = "; ".join(f"{g.label}: {g.reason}" for g in failed)
        writer.writerow([user, stamp, f"{earned:g}", f"{total:g}", len(failed), reasons])
        log(f"{user}: {earned:g} of {total:g}" + (f" ({reasons})" if reasons else ""))
        results.append((user, stamp, grades))
    path = collected / "grades.csv"
    path.write_text(out.getvalue())
    return results, path
