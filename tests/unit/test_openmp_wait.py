"""PyTorch's OpenMP threads wait passively in ScaleLab's kernels (issue 13): the parts that
need no running kernel. The rest runs in a real kernel in
``tests/integration/spark/test_openmp_wait.py``.
"""

from __future__ import annotations

from scalelab.kernels.import_order import passive_openmp_waits


def test_passive_unless_the_operator_chose():
    env: dict[str, str] = {}
    passive_openmp_waits(env)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}
    chosen = {"OMP_WAIT_POLICY": "ACTIVE"}
    passive_openmp_waits(chosen)
    assert chosen == {"OMP_WAIT_POLICY": "ACTIVE"}
