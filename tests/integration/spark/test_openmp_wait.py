"""PyTorch's OpenMP threads wait passively in ScaleLab's kernels (issue 13: Lab 2 on a CPU
profile within 10 minutes): spinning idle threads slowed its training 2.6 times on two busy
cores.

The parts that need no running service: ``tests/unit/test_openmp_wait.py``.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.kernelrun import Kernel


def test_a_kernel_sets_it_before_the_notebook_loads_torch(
    kernel_environment: dict[str, str], tmp_path: Path
):
    env = {k: v for k, v in kernel_environment.items() if k != "OMP_WAIT_POLICY"}
    with Kernel("scalelab-pytorch", env, cwd=str(tmp_path)) as kernel:
        out = kernel.run("import os, sys\nos.environ['OMP_WAIT_POLICY'], 'torch' in sys.modules")
        assert out["result"] == "('PASSIVE', False)", out
