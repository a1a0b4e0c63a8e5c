"""Copying the course labs into a student's home.

The labs ship as package data in ``scalelab.notebooks``. A lab already in the home is never
touched, whatever its content: the student's copy wins. Each copy is written to a temporary file
beside its target and renamed into place, so an interrupted copy never leaves half a notebook.
"""

from __future__ import annotations

import os
import tempfile
from importlib.resources import files
from pathlib import Path


def bundled_labs() -> dict[str, bytes]:
    """The labs shipped with ScaleLab: file name -> notebook bytes (``.ipynb`` JSON)."""
    folder = files("scalelab.notebooks")
    return {
        entry.name: entry.read_bytes()
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".ipynb")
    }


def distribute_labs(home: str | Path, labs: dict[str, bytes] | None = None) -> list[str]:
    """Copy each lab that is not yet in ``home``.

    Parameters
    ----------
    home
        The student's home (the server's root folder).
    labs
        File name -> bytes; :func:`bundled_labs` when None.

    Returns
    -------
    list of str
        Names of the labs copied (empty when every lab was there already).
    """
    home = Path(home)
    copied = []
    for name, content in (bundled_labs() if labs is None else labs).items():
        target = home / name
        if target.exists():
            continue
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=home)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(content)
            os.link(tmp, target)  # fails if the student created the file meanwhile: theirs wins
            copied.append(name)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    return copied
