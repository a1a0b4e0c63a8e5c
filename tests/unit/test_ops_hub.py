"""Live server logs for ops and the hub's security rules: the parts that need no running hub.
The rest runs through a real ``scalelab up`` in ``tests/integration/hub/test_ops_hub.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scalelab.cli import _parser
from scalelab.commands.up import resolve_password
from scalelab.hub_ext.hub.server_logs import read_lines
from scalelab.spawner.server_logs import server_log_path


def test_the_demo_binds_to_loopback_and_has_no_default_password(monkeypatch):
    monkeypatch.delenv("SCALELAB_PASSWORD", raising=False)
    args = _parser().parse_args(["up"])
    assert args.ip == "127.0.0.1" and args.password is None
    first, generated = resolve_password(None)
    second, _ = resolve_password(None)
    assert generated and first != second  # generated per run, never a fixed default


def test_log_lines_and_paths(tmp_path: Path):
    log = tmp_path / "server.log"
    log.write_bytes(b"one\ntwo\npartial")
    lines, offset = read_lines(log, 0)
    assert lines == [("one", 4), ("two", 8)] and offset == 8
    assert read_lines(log, 8) == ([], 8)  # the partial line waits for its newline
    assert server_log_path("/logs", "alice") == Path("/logs/alice/server.log")
    assert server_log_path("/logs", "a/../b", "gpu") == Path("/logs/a%2F..%2Fb/server-gpu.log")
    with pytest.raises(ValueError, match="no server_log_dir"):
        server_log_path("", "alice")


@pytest.mark.parametrize("name", ["nobody", "no%sbody"])
def test_logs_of_a_user_the_hub_does_not_know_are_a_404_naming_the_user(tmp_path: Path, name: str):
    from tornado import web

    from scalelab.hub_ext.hub.server_logs import require_user

    known = {"alice": object()}
    require_user(known.get, str(tmp_path), "alice")
    with pytest.raises(web.HTTPError) as info:
        require_user(known.get, str(tmp_path), name)
    assert info.value.status_code == 404
    message = info.value.log_message % info.value.args
    assert (
        message == f"no user {name!r} on this hub: check the name (the admin page lists the users)"
    )
    # a deleted user's logs outlive them
    server_log_path(tmp_path, "gone").parent.mkdir(parents=True)
    require_user(known.get, str(tmp_path), "gone")
    with pytest.raises(web.HTTPError):
        require_user(known.get, "", name)  # no log folder configured: only the hub's users
