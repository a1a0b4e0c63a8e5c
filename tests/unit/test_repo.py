"""Project hygiene that CI enforces: ruff, and lab notebooks committed valid and without outputs."""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest

from scalelab.kernels import KERNEL_NAMES
from tests.conftest import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_ruff_passes():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_there_are_three_labs():
    assert [p.name for p in NOTEBOOKS] == [
        "lab1_millionsong_regression.ipynb",
        "lab2_fashion_mnist_convnet.ipynb",
        "lab3_distributed_training.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_lab_is_valid_stripped_and_names_a_scalelab_kernel(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert nb.metadata.kernelspec.name in KERNEL_NAMES
    assert sum("parameters" in c.metadata.get("tags", []) for c in code) == 1
