"""A package's public names imported on first use (PEP 562's module ``__getattr__``).

``scalelab.store`` and ``scalelab.store.streaming`` re-export names from heavy modules (fsspec's
back ends, pyarrow, PyTorch); importing a light sibling such as ``scalelab.store.errors`` must
not pull those in.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package`` for ``names`` (public name -> defining module).

    Returns
    -------
    callable
        ``__getattr__(name)``: imports the module that defines ``name``, caches the value in the
        package's namespace and returns it.

    Raises
    ------
    AttributeError
        From the returned function, for a name not in ``names``.
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name]), name)
        setattr(importlib.import_module(package), name, value)
        return value

    return __getattr__
