"""PyTorch's OpenMP threads wait passively in ScaleLab's kernels (issue 13: Lab 2 on a CPU
profile within 10 minutes): spinning idle threads slowed its training 2.6 times on two busy
cores."""

from __future__ import annotations

from scalelab.kernels.import_order import passive_openmp_waits


def test_passive_unless_the_operator_chose():
    env: dict[str, str] = {}
    passive_openmp_waits(env)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}
    chosen = {"OMP_WAIT_POLICY": "ACTIVE"}
    passive_openmp_waits(chosen)
    assert chosen == {"OMP_WAIT_POLICY": "ACTIVE"}
