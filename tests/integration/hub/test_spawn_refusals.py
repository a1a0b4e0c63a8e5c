"""Refused server options (issue 11): the client's 400 (or 409) with the problem named, and in
the hub log one warning line naming the user and the reason, without JupyterHub's tracebacks and
error lines about it. A server PATCH with an unknown field is a 400, not JupyterHub's 500.

In-process: JupyterHub's own ``Spawner._run_apply_user_options`` runs ScaleLab's hook, on a log
with a handler of its own as the hub's; the lines JupyterHub's ``User.spawn``, its spawn-form
handler and tornado then write about the error are written as they write them. Against a real
``scalelab up``: tampered REST bodies, tampered spawn forms and PATCHes, and the hub log read.

The parts that need no running service: ``tests/unit/test_spawn_refusals.py``.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.hubproc import TWO_FAKE_GPUS, ScaleLabUp, running
from tests.unit.test_spawn_refusals import OVER_SHARE, TAMPERED

#: A request for more GPUs than the user may hold (c.GPUPolicy.max_gpus_per_user = 1).
OVER_SHARE_POLICY = "c.GPUPolicy.max_gpus_per_user = 1\n"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[ScaleLabUp]:
    up = ScaleLabUp(tmp_path / "state", extra_config=TWO_FAKE_GPUS + OVER_SHARE_POLICY)
    with running(up):
        yield up


def _form_post(hub: ScaleLabUp, user: str, fields: dict[str, str]) -> requests.Response:
    """The spawn form submitted by ``user``, logged in through the login form."""
    with requests.Session() as session:
        session.get(f"{hub.url}/hub/login", timeout=30)
        login = {"username": user, "password": hub.password, "_xsrf": session.cookies["_xsrf"]}
        response = session.post(
            f"{hub.url}/hub/login", data=login, timeout=30, allow_redirects=False
        )
        assert response.status_code == 302, response.text
        fields = {**fields, "_xsrf": session.cookies["_xsrf"]}
        return session.post(f"{hub.url}/hub/spawn", data=fields, timeout=60)


def _refusal_lines(log: Path, offset: int, expected: int, timeout_s: float = 30) -> list[str]:
    """The hub log's lines after ``offset`` characters, once ``expected`` refusal lines are in."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = log.read_text()[offset:].splitlines()
        if sum("] Refused a " in line for line in lines) >= expected:
            time.sleep(1)  # anything the hub still writes about them
            return log.read_text()[offset:].splitlines()
        if time.monotonic() > deadline:
            return lines
        time.sleep(0.2)


def test_tampered_spawns_and_patches_are_400s_each_with_one_warning_line(hub: ScaleLabUp):
    log = hub.state_dir / "logs" / "jupyterhub.log"
    assert hub.api("POST", "/users/eve").status_code == 201
    offset = len(log.read_text())
    refused: list[str] = []  # the line each refusal must have in the hub log

    for options, status, message in [*TAMPERED, OVER_SHARE]:
        response = hub.api("POST", "/users/eve/server", json={"user_options": options})
        assert response.status_code == status, (options, response.text)
        reason = response.json()["message"]
        assert message in reason, reason
        refused.append(f"Refused a start for user eve (HTTP {status}): {reason}")
    assert hub.api("GET", "/users/eve").json()["servers"] == {}  # nothing started

    for fields, message in [
        ({"profile": "gpu-9"}, "unknown profile 'gpu-9'"),
        ({"profile": "gpu-1", "spark_driver_memory": "999g"}, "not '999g'"),
    ]:
        response = _form_post(hub, "mallory", fields)
        assert response.status_code == 400
        page = html.unescape(response.text)
        assert message in page  # the form again, saying what is wrong
        refused.append("Refused a start for user mallory (HTTP 400): Invalid server options: ")

    patches = [
        ({"profile": "gpu-1"}, "unknown field(s) ['profile'] in a server PATCH"),
        ({"user_options": {"profile": "gpu-1"}, "gpus": 1}, "unknown field(s) ['gpus']"),
        ({"user_options": {"gpu": 1}}, "Invalid server options: unknown option(s) ['gpu']"),
    ]
    for body, message in patches:
        response = hub.api("PATCH", "/users/eve/server", json=body)
        assert response.status_code == 400, (body, response.text)  # JupyterHub 6.1.1: a 500
        reason = response.json()["message"]
        assert message in reason, reason
        refused.append(f"Refused a PATCH for user eve (HTTP 400): {reason}")
    # What JupyterHub's PATCH does is unchanged otherwise.
    good = hub.api("PATCH", "/users/eve/server", json={"user_options": {"profile": "gpu-1"}})
    assert good.status_code == 200, good.text
    assert good.json()["user_options"] == {"profile": "gpu-1"}
    assert hub.api("GET", "/users/eve/server").status_code == 200
    assert hub.api("PATCH", "/users/nobody/server", json={"x": 1}).status_code == 404

    lines = _refusal_lines(log, offset, len(refused))
    text = "\n".join(lines)
    assert "Traceback" not in text, text
    assert [line for line in lines if line.startswith("[E ")] == [], text
    # One warning line per refusal, naming the user and the reason; no other line repeats it.
    own = [line for line in lines if "] Refused a " in line]
    assert len(own) == len(refused), "\n".join(own)
    for line, expected in zip(own, refused, strict=True):
        assert line.startswith("[W ") and f"] {expected}" in line, (line, expected)
        reason = line.split("): ", 1)[1]
        assert [other for other in lines if reason in other and other not in own] == []
    # Beside them, only the access log's line of each request is a warning (its status).
    others = [
        line
        for line in lines
        if line.startswith("[W ")
        and "] Refused a " not in line
        and " JupyterHub log:" not in line
        # The idle culler's start-up line, when it starts within the window: it falls back to
        # tornado's own HTTP client (no pycurl), which is what ScaleLab wants.
        and "Could not load pycurl" not in line
    ]
    assert others == [], others
