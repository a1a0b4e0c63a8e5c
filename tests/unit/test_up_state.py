"""``scalelab up``'s state folder refused in one line, stale pid files, and a hub tied to its
parent through PR_SET_PDEATHSIG (real processes, no hub)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from scalelab.cli import main
from scalelab.commands.up import state_folder_line
from scalelab.commands.upstate import earlier_run, make_state_dir
from scalelab.common.ports import free_port

SUFFIX = "; choose a folder you can write"


def _snapshot(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("/etc/passwd", "it is a file, not a folder"),
        ("/etc/passwd/scalelab", "/etc/passwd is a file, not a folder"),
        ("/proc/nc", "it cannot be created in /proc ("),  # ENOENT for root, EACCES else
        ("/proc/nc/deeper/state", "it cannot be created in /proc ("),
        ("/proc", "it is not writable ("),
    ],
)
def test_an_unusable_state_folder_is_one_line_and_exit_2(
    state: str, reason: str, capsys: pytest.CaptureFixture[str]
):
    assert main(["up", "--state-dir", state, "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"scalelab: error: cannot use --state-dir {state}: {reason}"), err
    assert err.rstrip().endswith(SUFFIX), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not Path("/proc/nc").exists()


def test_a_state_folder_under_a_file_of_ours_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    (tmp_path / "notes.txt").write_text("a student's file")
    before = _snapshot(tmp_path)
    for state in (tmp_path / "notes.txt", tmp_path / "notes.txt" / "state"):
        assert main(["up", "--state-dir", str(state), "--port", str(free_port())]) == 2
        err = capsys.readouterr().err
        assert f"cannot use --state-dir {state}: " in err and "a file, not a folder" in err
    assert _snapshot(tmp_path) == before
    assert (tmp_path / "notes.txt").read_text() == "a student's file"


def test_the_state_folder_from_the_environment_is_named_as_such(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("SCALELAB_STATE_DIR", "/etc/passwd")
    assert main(["up", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scalelab: error: cannot use $SCALELAB_STATE_DIR /etc/passwd: it is")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0o555 folder anyway")
def test_a_read_only_folder_is_refused_and_left_as_it_was(tmp_path: Path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        assert make_state_dir(locked / "state", ("homes",)) == (
            f"it cannot be created in {locked} (Permission denied)"
        )
        assert make_state_dir(locked, ("homes",)) == "it is not writable (Permission denied)"
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


def test_a_good_state_folder_is_created_with_its_subfolders_and_no_probe_left(tmp_path: Path):
    state = tmp_path / "a" / "b" / "state"
    assert make_state_dir(state, ("homes", "logs")) is None
    assert sorted(p.name for p in state.iterdir()) == ["homes", "logs"]
    assert make_state_dir(state, ("homes", "logs")) is None  # a re-run is fine


def test_a_subfolder_that_is_a_file_is_named_and_new_folders_are_removed(tmp_path: Path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "logs").write_text("not a folder")
    assert make_state_dir(state, ("homes", "logs")) == (
        f"{state / 'logs'} cannot be created (File exists)"
    )
    assert sorted(p.name for p in state.iterdir()) == ["logs"]  # homes/ made, then removed


def test_stale_pid_files_are_not_an_earlier_run(tmp_path: Path):
    assert earlier_run(tmp_path) is None  # no pid files
    (tmp_path / "jupyterhub.pid").write_text("not a pid")
    assert earlier_run(tmp_path) is None
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / "jupyterhub.pid").write_text(str(gone.pid))
    (tmp_path / "jupyterhub-proxy.pid").write_text(str(gone.pid))
    assert earlier_run(tmp_path) is None
    # A live process under a reused pid that is not this folder's hub or a proxy.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "jupyterhub.pid").write_text(str(other.pid))
        (tmp_path / "jupyterhub-proxy.pid").write_text(str(other.pid))
        assert earlier_run(tmp_path) is None
    finally:
        other.kill()
        other.wait()


# A parent that starts a long-sleeping child with die_with_parent, prints the child's pid, and
# waits; the test SIGKILLs the parent, as `kill -9` of `scalelab up` would.
PARENT = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    from scalelab.common.pdeathsig import die_with_parent
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        start_new_session=True,
        preexec_fn=die_with_parent(signal.SIGTERM),
    )
    print(child.pid, flush=True)
    time.sleep(300)
    """
)


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_child_with_die_with_parent_gets_sigterm_when_its_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        assert child.ppid() == parent.pid and not _gone(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=60)
        deadline = time.monotonic() + 60
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(child), f"child {child.pid} survived its parent: {child.status()}"
    finally:
        if child is not None and not _gone(child):
            child.kill()
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def test_the_banner_says_whether_the_state_folder_holds_an_earlier_runs_hub():
    assert state_folder_line(Path("/srv/s"), False) == "State folder: /srv/s (new)"
    kept = state_folder_line(Path("/srv/s"), True)
    assert kept.startswith("State folder: /srv/s (an earlier run's") and "--state-dir" in kept
