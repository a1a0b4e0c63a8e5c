"""Tests that make students' system users (``scalelab up`` as root): their pytest marks and
their clean-up."""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterable

import pytest

from scalelab.commands.identity import blocked_for_others, install_paths
from scalelab.spawner.system_users import COMMENT

#: A folder of this checkout or its Python that other users cannot enter (a clone under /root):
#: then no student's user could run ScaleLab, and scalelab up runs a single-user trial instead.
BLOCKED = blocked_for_others(install_paths())

#: The marks of such a test module: root (CI runs as root), a reachable checkout. (Such modules
#: share one worker: tests/support/workgroups.py.)
MARKS = [
    pytest.mark.skipif(os.geteuid() != 0, reason="makes system users: needs root (CI is root)"),
    pytest.mark.skipif(
        BLOCKED is not None,
        reason=f"students' users cannot run this checkout's Python: {BLOCKED}; clone elsewhere",
    ),
]


def remove_users(users: Iterable[str]) -> None:
    """``userdel`` the system users ``jupyter-<user>`` that exist; each must be ScaleLab's."""
    for user in users:
        name = f"jupyter-{user}"
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        assert entry.pw_gecos.startswith(COMMENT), f"{name} exists and is not ScaleLab's"
        subprocess.run(["userdel", name], check=False, capture_output=True)
