"""A kernel prints a new notice from the hub (e.g. an idle-GPU warning) before the next cell.

The notice file is ``$SCALELAB_NOTICE_FILE``, written by the server extension
(:mod:`scalelab.hub_ext.server.notices`). Each notice is printed once per kernel, to stderr, so
JupyterLab shows it in the cell's output in red.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from scalelab import envvars


def new_notice(path: str | None, seen: set[str]) -> str | None:
    """The message of the notice in ``path`` if its id is not in ``seen`` (then added), else
    None. Never raises: a missing or broken file means no notice."""
    if not path:
        return None
    try:
        notice = json.loads(Path(path).read_text())
        key, message = str(notice["id"]), str(notice["message"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if key in seen:
        return None
    seen.add(key)
    return message


def install(shell: Any) -> None:
    """Register the ``pre_run_cell`` hook on an IPython ``shell``."""
    seen: set[str] = set()

    def show(*_args: Any) -> None:
        message = new_notice(os.environ.get(envvars.NOTICE_FILE), seen)
        if message:
            print(f"ScaleLab: {message}")  # a notice, not an error: normal output

    shell.events.register("pre_run_cell", show)
