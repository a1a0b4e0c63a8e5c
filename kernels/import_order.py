"""Triton loaded before TensorFlow, so that a kernel using both does not die.

TensorFlow's wheels from 2.20 on load their library with ``RTLD_GLOBAL``, which puts the LLVM
that TensorFlow links statically into the process's global symbol table; Triton 3.7 and later
(installed with PyPI's ``torch``) carries its own LLVM, and ``libtriton.so`` loaded after
TensorFlow binds to TensorFlow's copy and crashes in its initialisers (SIGSEGV; upstream:
tensorflow/tensorflow#124205). PyTorch imports Triton lazily, at the first ``torch.optim``
step, so ``import tensorflow`` then any PyTorch training in one kernel killed the kernel (Lab 2
does both). Loaded the other way round, both work.

:func:`install` adds an import hook that, when ``tensorflow`` is about to be imported for the
first time, imports Triton first if it is installed; it costs nothing until then (Triton's own
import takes about 0.2 s) and nothing at all where Triton or TensorFlow is missing.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any


class TritonBeforeTensorFlow(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder that finds nothing; it imports Triton ahead of TensorFlow."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname != "tensorflow":
            return None
        uninstall()  # once: the import below must not come back here
        if "triton" not in sys.modules and importlib.util.find_spec("triton") is not None:
            try:
                import triton  # noqa: F401 -- loaded for its LLVM, before TensorFlow's
            except Exception:  # noqa: BLE001 -- a broken Triton must not stop TensorFlow
                pass
        return None


def install() -> bool:
    """Put the hook first on ``sys.meta_path``, unless TensorFlow is imported already (then it
    is too late, and harmless only if Triton was loaded first).

    Returns
    -------
    bool
        Whether the hook is in place.
    """
    if "tensorflow" in sys.modules:
        return False
    if not any(isinstance(f, TritonBeforeTensorFlow) for f in sys.meta_path):
        sys.meta_path.insert(0, TritonBeforeTensorFlow())
    return True


def uninstall() -> None:
    """Take the hook off ``sys.meta_path`` (no error when it is not there)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, TritonBeforeTensorFlow)]
