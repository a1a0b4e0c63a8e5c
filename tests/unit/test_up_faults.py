"""Fault drills on ``scalelab up`` (issue 12): the parts that need no running hub, kernel or
cluster. The rest runs for real in ``tests/integration/hub/test_up_faults.py``.
"""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import pytest

from scalelab.cli import main
from scalelab.common.ports import free_port


def _listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_refused_start_on_a_taken_port_creates_no_state_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    with _listening_socket() as taken:
        port = taken.getsockname()[1]
        state = tmp_path / "new" / "state"
        args = ["up", "--state-dir", str(state), "--port", str(port), "--shared-identity"]
        assert main(args) == 2
        assert f"port {port} on 127.0.0.1 is already in use" in capsys.readouterr().err
        assert list(tmp_path.iterdir()) == []

        old = tmp_path / "old"
        (old / "homes" / "alice").mkdir(parents=True)
        (old / "homes" / "alice" / "work.ipynb").write_text("{}")
        before = set(old.rglob("*"))
        assert main(["up", "--state-dir", str(old), "--port", str(port), "--shared-identity"]) == 2
        assert "already in use" in capsys.readouterr().err
        assert set(old.rglob("*")) == before  # no logs/, no lock file, homes kept as they were


def test_a_refused_config_file_of_mode_0644_creates_no_state_folder(
    capsys: pytest.CaptureFixture[str],
):
    """Run by root without ``--shared-identity``, students get system users, and a 0644
    ``--config`` is refused after the state folder was opened for them (store folders made)."""
    if not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() != 0:
        pytest.skip("the 0644 refusal is for root, who gives students system users")
    # Under /tmp, reachable by other users (pytest's tmp_path is not): system users apply.
    with tempfile.TemporaryDirectory(dir="/tmp") as top:
        Path(top).chmod(0o755)
        config = Path(top) / "hub_config.py"
        config.write_text("c.JupyterHub.cleanup_servers = True\n")
        config.chmod(0o644)
        port = str(free_port())
        state = Path(top) / "state"
        assert main(["up", "--state-dir", str(state), "--port", port, "--config", str(config)]) == 2
        assert "is readable by other users (mode 0644)" in capsys.readouterr().err
        assert sorted(p.name for p in Path(top).iterdir()) == ["hub_config.py"]

        state.mkdir()
        (state / "notes.txt").write_text("kept")
        assert main(["up", "--state-dir", str(state), "--port", port, "--config", str(config)]) == 2
        assert "mode 0644" in capsys.readouterr().err
        assert [p.name for p in state.rglob("*")] == ["notes.txt"]
