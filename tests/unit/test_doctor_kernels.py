"""``scalelab doctor``'s check of the kernels the servers will offer
(``scalelab.commands.doctor_kernels``), on kernelspec folders written by each test."""

from __future__ import annotations

import json
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
