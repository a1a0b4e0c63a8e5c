"""TensorFlow and PyTorch training in one kernel: Triton must load before TensorFlow.

Each case runs in a fresh interpreter, so that a segfault is a failed assertion, not a dead
test runner. The fault itself is PyPI's wheels' (tensorflow/tensorflow#124205): TensorFlow
>= 2.20 loads its LLVM globally, and Triton >= 3.7 loaded after it crashes.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

TRAIN_AFTER_TF = (
    "import tensorflow\n"
    "import torch\n"
    "model = torch.nn.Linear(3, 2)\n"
    "optimizer = torch.optim.Adam(model.parameters())  # imports triton, lazily\n"
    "model(torch.zeros(1, 3)).sum().backward()\n"
    "optimizer.step()\n"
    "print('trained')\n"
)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)


def test_a_kernel_start_lets_torch_train_after_tensorflow():
    done = _run(
        "from scalelab.kernels import import_order\n"
        "assert import_order.install()\n" + TRAIN_AFTER_TF
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "trained"


def test_the_hook_is_used_once_and_is_a_no_op_after_tensorflow():
    done = _run(
        "import sys\nfrom scalelab.kernels import import_order\n"
        "assert import_order.install() and import_order.install()\n"
        "hook = import_order.TritonBeforeTensorFlow\n"
        "assert len([f for f in sys.meta_path if isinstance(f, hook)]) == 1\n"
        "import tensorflow\n"
        "assert not [f for f in sys.meta_path if isinstance(f, hook)]\n"
        "assert ('triton' in sys.modules) == (import_order.importlib.util.find_spec('triton') "
        "is not None)\n"
        "assert import_order.install() is False  # too late once TensorFlow is in\n"
        "print('ok')\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="no Triton installed (a CPU-only torch): the crash cannot happen here",
)
def test_without_the_hook_torch_training_after_tensorflow_dies():
    """The fault the hook exists for, so that a TensorFlow or Triton that fixes it shows here."""
    done = _run(TRAIN_AFTER_TF)
    assert done.returncode == -11, (done.returncode, done.stdout)  # SIGSEGV
