"""Triton loaded before TensorFlow, so that a kernel using both does not die.

:func:`install` adds an import hook that imports Triton (if installed) just before the first
``import tensorflow`` and runs that import with known-harmless stderr lines dropped
(:data:`TENSORFLOW_IMPORT_LINES`); it also sets PyTorch's OpenMP waits
(:func:`passive_openmp_waits`). Why: docs/design-notes.md, scalelab.kernels.import_order.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import MutableMapping
from types import ModuleType
from typing import Any

from scalelab.common.stderr_lines import Harmless, filtered_stderr

#: What ``import tensorflow`` writes to fd 2 that is no error (see the module's doc).
TENSORFLOW_IMPORT_LINES = (
    Harmless(
        line=re.compile(rb"I\d{4} \S+\s+\d+ \S+\] oneDNN custom operations are on\. .*"),
        preamble=re.compile(
            rb"WARNING: All log messages before absl::InitializeLog\(\) is called are "
            rb"written to STDERR"
        ),
        why="TensorFlow's note that its CPU kernels use oneDNN (numbers may differ in the last "
        "bits); written before logging starts, so no log level silences it",
    ),
)


class TritonBeforeTensorFlow(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder for ``tensorflow`` only: it imports Triton first, then gives
    TensorFlow's own spec with a loader that runs the import with fd 2 filtered."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "tensorflow":
            return None
        uninstall()  # once: the import below must not come back here
        if "triton" not in sys.modules and importlib.util.find_spec("triton") is not None:
            try:
                import triton  # noqa: F401 -- loaded for its LLVM, before TensorFlow's
            except Exception:  # noqa: BLE001 -- a broken Triton must not stop TensorFlow
                pass
        for finder in sys.meta_path:  # the finder that would have found it (this one is off)
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = QuietImport(spec.loader)
                return spec
        return None


class QuietImport(importlib.abc.Loader):
    """Runs a module's own loader with fd 2 filtered (:data:`TENSORFLOW_IMPORT_LINES`); the
    module keeps its own loader as ``__loader__`` and ``__spec__.loader``."""

    def __init__(self, loader: Any):
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        with filtered_stderr(TENSORFLOW_IMPORT_LINES):
            self.loader.exec_module(module)


def install() -> bool:
    """Put the hook first on ``sys.meta_path``, unless TensorFlow is imported already (then it
    is too late, and harmless only if Triton was loaded first).

    Returns
    -------
    bool
        Whether the hook is in place.
    """
    passive_openmp_waits()
    if "tensorflow" in sys.modules:
        return False
    if not any(isinstance(f, TritonBeforeTensorFlow) for f in sys.meta_path):
        sys.meta_path.insert(0, TritonBeforeTensorFlow())
    return True


def passive_openmp_waits(environ: MutableMapping[str, str] | None = None) -> None:
    """``OMP_WAIT_POLICY=PASSIVE`` in ``environ`` (default: this process's), unless set.

    PyTorch's CPU operations run on OpenMP threads (libgomp), whose idle threads by default spin
    for a while before they sleep. On a shared machine a spinning thread takes the core that
    its partner needs: on two busy cores Lab 2's ConvNet trained 2.6 times slower with two
    threads than with passive waits (0.38 against 0.15 s a step). libgomp reads the setting
    when it is loaded, at PyTorch's first import, so it is set before any notebook code runs.
    """
    env = os.environ if environ is None else environ
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def uninstall() -> None:
    """Take the hook off ``sys.meta_path`` (no error when it is not there)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, TritonBeforeTensorFlow)]
