"""Who servers run as: ``scalelab up``'s decision (pure), the state folder's modes, the
spawner's system-user mode, and a real ``scalelab up`` that refuses a shared identity beyond
loopback. The hostile student's drill against system users is
tests/integration/hub/test_isolation.py.

The parts that need no running service: ``tests/unit/test_identity.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scalelab.common.ports import free_port


@pytest.mark.skipif(os.geteuid() != 0, reason="the root path of scalelab up: needs root (CI)")
def test_up_as_root_with_an_unreachable_state_folder_refuses_other_machines(tmp_path: Path):
    # pytest's tmp_path lies in its own 0700 folder: no student's user could enter it.
    argv = [
        sys.executable, "-m", "scalelab", "up", "--state-dir", str(tmp_path / "state"),
        "--port", str(free_port()), "--ip", "0.0.0.0",
    ]  # fmt: skip
    env = {**os.environ, "SCALELAB_PASSWORD": "a-long-password"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert "--ip 0.0.0.0 would serve other machines" in done.stderr
    found = re.search(r"students' system users could not run ScaleLab: (\S+) \(mode", done.stderr)
    assert found, done.stderr
    assert (tmp_path / "state").is_relative_to(found[1]) and found[1] != str(tmp_path / "state")
    assert "--shared-identity" in done.stderr
    assert not (tmp_path / "state").exists()  # a refused start leaves no state folder it made
