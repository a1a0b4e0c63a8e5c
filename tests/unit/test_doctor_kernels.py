"""``scalelab doctor``'s check of the kernels the servers will offer
(``scalelab.commands.doctor_kernels``), on kernelspec folders written by each test."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import jupyter_core.paths
import pytest

from scalelab.commands.doctor_kernels import check_kernels, required_modules
from scalelab.commands.doctor_report import FAIL, OK, WARN
from scalelab.kernels.specs import kernelspec

OURS = ["scalelab-pyspark", "scalelab-pytorch", "scalelab-tensorflow"]


@pytest.fixture(autouse=True)
def only_the_tests_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jupyter's own data path empty: only the folders a test names hold kernelspecs."""
    monkeypatch.setattr(jupyter_core.paths, "jupyter_path", lambda *parts: [])


def _spec(folder: Path, name: str, argv: list[str], **extra: object) -> None:
    (folder / "kernels" / name).mkdir(parents=True)
    spec = {"argv": argv, "display_name": name, "language": "python", **extra}
    (folder / "kernels" / name / "kernel.json").write_text(json.dumps(spec))


def test_the_modules_each_kernel_needs():
    assert required_modules(kernelspec("pyspark")) == [
        "ipykernel_launcher",
        "scalelab.kernels.startup",
        "pyspark",
    ]
    assert required_modules(kernelspec("pytorch"))[-1] == "torch"
    assert required_modules({"argv": ["R", "--slave", "-e", "IRkernel::main()"]}) == []


def test_scalelab_ups_own_kernels_are_checked_as_it_will_write_them(tmp_path: Path):
    state_kernels = str(tmp_path / "state" / "share" / "jupyter")  # not written yet
    check = check_kernels([state_kernels], up_writes=state_kernels)
    assert check.status == OK
    assert (
        check.detail == f"4 kernels ready: python3, {', '.join(OURS)}"
    )  # python3: ipykernel's own


def test_a_missing_program_and_a_missing_module_are_each_named(tmp_path: Path):
    _spec(tmp_path, "broken", ["/opt/nowhere/python", "-m", "ipykernel_launcher"])
    _spec(tmp_path, "nomod", ["python", "-m", "no_such_kernel_module_here"])
    _spec(tmp_path, "fine", ["python", "-m", "ipykernel_launcher"])
    check = check_kernels([str(tmp_path)], up_writes=str(tmp_path))
    assert check.status == FAIL
    assert "broken: its program '/opt/nowhere/python' is not found or not executable" in (
        check.detail
    )
    assert f"nomod: {sys.executable} has no module no_such_kernel_module_here" in check.detail
    assert "fine" not in check.detail and "scalelab-" not in check.detail
    assert "kernel.json" in check.fix


def test_an_environment_without_the_kernels_libraries_fails_that_kernel(tmp_path: Path):
    """An interpreter without site-packages (``python -S``): no ipykernel, no ScaleLab, no
    torch, all named; the kernels of the servers' own Python are fine."""
    python = tmp_path / "python-bare"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    flavour = {"scalelab": {"flavour": "pytorch"}}
    _spec(tmp_path, "scalelab-pytorch", [str(python), "-m", "ipykernel_launcher"], metadata=flavour)
    check = check_kernels([str(tmp_path)])
    assert check.status == FAIL
    assert check.detail == (
        f"scalelab-pytorch: {python} has no module ipykernel_launcher, "
        "scalelab.kernels.startup, torch"
    )


def test_an_interpreter_that_does_not_run_is_named_with_its_exit_status(tmp_path: Path):
    python = tmp_path / "python-broken"
    python.write_text("#!/bin/sh\necho 'error while loading shared libraries' >&2\nexit 127\n")
    python.chmod(0o755)
    _spec(tmp_path, "old-env", [str(python), "-m", "ipykernel_launcher"])
    check = check_kernels([str(tmp_path)], up_writes=str(tmp_path))
    assert check.status == FAIL
    assert f"old-env: {python} exits with status 127: error while loading" in check.detail


def test_scalelabs_kernels_installed_nowhere_are_a_warning(tmp_path: Path):
    _spec(tmp_path, "python3", ["python", "-m", "ipykernel_launcher"])
    check = check_kernels([str(tmp_path)])  # an operator's folder, not scalelab up's
    assert check.status == WARN
    assert check.detail.endswith(", ".join(OURS))
    assert "scalelab kernels install" in check.fix


def _kernel_that_prints_and_exits(text: str) -> list[str]:
    return [sys.executable, "-c", f"import sys; print({text!r}); sys.exit(3)", "{connection_file}"]


def test_each_kernel_is_started_for_real_and_one_that_dies_is_named_with_its_last_line(
    tmp_path: Path,
):
    """A kernel whose program and modules are all there but whose start-up crashes (here: it
    prints a line and exits) reached students as a notebook that never connects."""
    _spec(tmp_path, "fine", [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    _spec(tmp_path, "dies", _kernel_that_prints_and_exits("RuntimeError: no CUDA driver here"))
    check = check_kernels([str(tmp_path)], start_env=dict(os.environ), start_timeout_s=60)
    assert check.status == FAIL
    assert check.detail == "dies: died as it started: RuntimeError: no CUDA driver here"
    assert "started by hand" in check.fix


def test_a_kernel_that_never_answers_is_named_with_the_wait(tmp_path: Path):
    _spec(tmp_path, "silent", [sys.executable, "-c", "import time; time.sleep(600)"])
    check = check_kernels([str(tmp_path)], start_env=dict(os.environ), start_timeout_s=3)
    assert (check.status, check.detail) == (FAIL, "silent: started but did not answer within 3 s")


def test_kernels_that_start_are_listed_with_their_time_and_leave_nothing_behind(tmp_path: Path):
    kernels = tmp_path / "share"
    _spec(kernels, "fine", [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    before = sorted(tmp_path.rglob("*"))
    check = check_kernels([str(kernels)], start_env=env, start_timeout_s=60)
    assert check.status == WARN  # ScaleLab's own kernels are not installed there
    started = check_kernels([str(kernels)], up_writes=str(kernels), start_env=env)
    assert started.status == OK, started.detail
    assert re.fullmatch(
        r"5 kernels start and answer: fine \d+\.\d s, python3 \d+\.\d s, "
        r"scalelab-pyspark \d+\.\d s, "
        r"scalelab-pytorch \d+\.\d s, scalelab-tensorflow \d+\.\d s",
        started.detail,
    ), started.detail
    assert sorted(tmp_path.rglob("*")) == before  # the kernels' folders are gone
