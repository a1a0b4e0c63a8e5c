"""``scalelab submit`` and ``scalelab submissions``: hand in a lab from a terminal of one's own
server, and list what was handed in (:mod:`scalelab.hub_ext.labs.handin_client`).
Why: docs/design-notes.md, scalelab.hub_ext.labs.handin.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from scalelab.hub_ext.labs.handin_client import HandInFailed, hub_of, lab_of, send


def notebook_for(lab: str, given: str | None, cwd: Path, home: Path) -> Path:
    """The notebook to hand in: ``given``, else ``<lab>.ipynb`` in ``cwd``, else in ``home``.

    Raises
    ------
    HandInFailed
        No such file (the message names where it looked).
    """
    name = f"{lab_of(lab)}.ipynb"
    candidates = [Path(given)] if given else [cwd / name, home / name]
    for path in candidates:
        if path.is_file():
            return path
    raise HandInFailed(
        f"no notebook {' or '.join(str(p) for p in candidates)}: give its path, "
        f"`scalelab submit {lab} path/to/notebook.ipynb`."
    )


def submit(lab: str, path: str | None, environ: Mapping[str, str] = os.environ) -> dict:
    """Hand in ``lab`` (the notebook at ``path``, see :func:`notebook_for`); the receipt.

    Raises
    ------
    HandInFailed
        Not in a course server, no notebook, or the hub refused (its message says why).
    """
    hub_of(environ)  # outside a course server, say so before looking for the notebook
    home = Path(environ.get("HOME", "~")).expanduser()
    notebook = notebook_for(lab, path, Path.cwd(), home)
    return send(lab, notebook.read_bytes(), environ)
