"""How the operator calls ``scalelab``, for the commands ScaleLab prints as fixes."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def scalelab_command() -> str:
    """How to call this ``scalelab`` from the operator's shell: ``scalelab`` when that name on
    the PATH is this one, else the absolute path of the one beside this Python (the README's
    ``.venv/bin/scalelab``, which a fresh install does not put on the PATH)."""
    beside = Path(sys.executable).with_name("scalelab")
    if not beside.exists():
        return "scalelab"
    on_path = shutil.which("scalelab")
    if on_path is not None and Path(on_path).resolve() == beside.resolve():
        return "scalelab"
    return str(beside)
