"""sparkmagic's real PySpark kernel, as ScaleLab configures it, against a MOCK Livy server.

Livy (a Java server) is on neither PyPI, npm nor Debian, so it cannot run here: ``MockLivy`` is a
small HTTP server that answers only the Livy REST calls sparkmagic makes and records the session
bodies it receives. Everything else is real: the kernelspec and ``config.json`` ScaleLab writes,
sparkmagic 0.23 in its own environment (``.venv-livy``, made by ``install.sh``), jupyter_client.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from traitlets.config import Config

from scalelab.common.ports import free_port
from scalelab.kernels.livy import (
    SPARKMAGIC_KERNELS,
    LivySettings,
    effective_session,
    livy_environment,
    prepare_server,
    settings_from_environment,
    sparkmagic_config,
    sparkmagic_problem,
)
from tests.support.hubproc import ScaleLabUp, execute
from tests.support.jsonhttp import JSONHandler
from tests.support.kernelrun import Kernel

LIVY_PYTHON = Path(__file__).resolve().parents[3] / ".venv-livy" / "bin" / "python"

OPS_SESSION = {
    "queue": "course",
    "driverMemory": "2g",
    "conf": {"spark.executor.memoryOverhead": "1g", "spark.dynamicAllocation.enabled": "false"},
}


class MockLivy(ThreadingHTTPServer):
    """MOCK of Apache Livy's REST API (Livy cannot run here): sessions are idle at once,
    statements available at once with ``text/plain`` output. ``sessions_posted`` records each
    ``POST /sessions`` body, ``statements_posted`` each statement's code."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _LivyHandler)
        self.lock = threading.Lock()
        self.sessions: dict[int, dict] = {}
        self.sessions_posted: list[dict] = []
        self.statements_posted: list[str] = []
        self.deleted: list[int] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _LivyHandler(JSONHandler):
    server: MockLivy

    def _session(self, sid: int) -> dict:
        return {
            "id": sid,
            "state": "idle",
            "kind": self.server.sessions[sid]["kind"],
            "appId": f"application_mock_{sid}",
            "appInfo": {"driverLogUrl": None, "sparkUiUrl": None},
            "log": [],
        }

    def do_POST(self) -> None:
        parts = self.path.strip("/").split("/")
        body = self.json_body()
        with self.server.lock:
            if parts == ["sessions"]:
                sid = len(self.server.sessions_posted)
                self.server.sessions_posted.append(body)
                self.server.sessions[sid] = {"kind": body.get("kind", "pyspark"), "statements": []}
                return self.reply(201, self._session(sid))
            if len(parts) == 3 and parts[0] == "sessions" and parts[2] == "statements":
                session = self.server.sessions[int(parts[1])]
                session["statements"].append(body["code"])
                self.server.statements_posted.append(body["code"])
                return self.reply(201, {"id": len(session["statements"]) - 1, "state": "waiting"})
        self.reply(404, {"msg": f"mock Livy: no POST {self.path}"})

    def do_GET(self) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        with self.server.lock:
            if parts == ["sessions"]:
                sessions = [self._session(sid) for sid in self.server.sessions]
                return self.reply(200, {"from": 0, "total": len(sessions), "sessions": sessions})
            if parts[0] == "sessions" and len(parts) >= 2 and int(parts[1]) in self.server.sessions:
                sid = int(parts[1])
                if len(parts) == 2:
                    return self.reply(200, self._session(sid))
                if parts[2:] == ["log"]:
                    return self.reply(200, {"id": sid, "from": 0, "total": 0, "log": []})
                if parts[2] == "statements" and len(parts) == 4:
                    stid = int(parts[3])
                    code = self.server.sessions[sid]["statements"][stid]
                    output = {
                        "status": "ok",
                        "execution_count": stid,
                        "data": {"text/plain": f"mock Livy ran: {code}"},
                    }
                    return self.reply(200, {"id": stid, "state": "available", "output": output})
        self.reply(404, {"msg": f"mock Livy: no GET {self.path}"})

    def do_DELETE(self) -> None:
        parts = self.path.strip("/").split("/")
        with self.server.lock:
            if len(parts) == 2 and parts[0] == "sessions":
                self.server.deleted.append(int(parts[1]))
                self.server.sessions.pop(int(parts[1]), None)
                return self.reply(200, {"msg": "deleted"})
        self.reply(404, {"msg": f"mock Livy: no DELETE {self.path}"})


@pytest.fixture
def mock_livy() -> Iterator[MockLivy]:
    server = MockLivy()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def _livy_kernel(url: str, tmp_path: Path) -> Kernel:
    """sparkmagic's PySpark kernel as a single-user server gets it from the hub's settings."""
    if not LIVY_PYTHON.exists():
        pytest.fail(f"{LIVY_PYTHON} is missing: run ./install.sh (it installs sparkmagic there)")
    c = Config()
    c.LivySettings.url = url
    c.LivySettings.session_configs = OPS_SESSION
    c.LivySettings.kernel_python = str(LIVY_PYTHON)
    env = livy_environment(LivySettings(config=c))  # the hub's side, through SCALELAB_LIVY
    settings = settings_from_environment(env)  # the server's side
    state = tmp_path / ".scalelab"
    conf_dir, kernels_dir = prepare_server(settings, state)
    assert kernels_dir == state / "kernels"
    kernel_env = {
        **os.environ,  # a kernel inherits its server's environment
        "HOME": str(tmp_path),  # sparkmagic logs under ~/.sparkmagic
        "SPARKMAGIC_CONF_DIR": str(conf_dir),
        "JUPYTER_PATH": str(state),
    }
    return Kernel("sparkmagic-pyspark", kernel_env, cwd=str(tmp_path))


def _text(out: dict) -> str:
    return out["stdout"] + out["stderr"] + (out["result"] or "")


def test_configure_keeps_ops_session_settings(mock_livy: MockLivy, tmp_path: Path):
    with _livy_kernel(mock_livy.url, tmp_path) as kernel:
        configured = kernel.run('%%configure -f\n{"executorMemory": "4g"}', timeout_s=120)
        assert configured["status"] == "ok", configured
        assert mock_livy.sessions_posted == []  # no session yet: %%configure only sets
        out = kernel.run("print(1 + 1)", timeout_s=180)
        assert "mock Livy ran: print(1 + 1)" in _text(out), out
        assert kernel.km.is_alive()
    assert len(mock_livy.sessions_posted) == 1
    body = mock_livy.sessions_posted[0]
    assert body["executorMemory"] == "4g"  # the student's
    assert body["queue"] == "course" and body["driverMemory"] == "2g"  # ops'
    assert body["conf"] == OPS_SESSION["conf"]
    assert body["kind"] == "pyspark"
    # What ScaleLab tells ops a session gets is what sparkmagic sent.
    conf = sparkmagic_config(LivySettings(session_configs=OPS_SESSION, url=mock_livy.url))
    expected = effective_session(
        conf["session_configs_defaults"],
        {"executorMemory": "4g", "kind": "pyspark"},
        heartbeat_s=conf["livy_server_heartbeat_timeout_seconds"],
    )
    assert body == expected
    assert body["heartbeatTimeoutInSecond"] == 900  # ScaleLab's, not sparkmagic's 60
    # sparkmagic's own "spark" at session start, then the student's cell
    assert [code.strip() for code in mock_livy.statements_posted] == ["spark", "print(1 + 1)"]


def test_configure_conf_adds_to_ops_conf(mock_livy: MockLivy, tmp_path: Path):
    student = {"conf": {"spark.sql.shuffle.partitions": "64"}, "queue": "course-big"}
    with _livy_kernel(mock_livy.url, tmp_path) as kernel:
        kernel.run(f"%%configure -f\n{json.dumps(student)}", timeout_s=120)
        out = kernel.run("spark.range(3).count()", timeout_s=180)
        assert "mock Livy ran: spark.range(3).count()" in _text(out), out
    body = mock_livy.sessions_posted[0]
    assert body["conf"] == {**OPS_SESSION["conf"], "spark.sql.shuffle.partitions": "64"}
    assert body["queue"] == "course-big"  # a student may change a key ...
    assert body["driverMemory"] == "2g"  # ... and keeps ops' others


def test_plain_session_gets_ops_settings(mock_livy: MockLivy, tmp_path: Path):
    with _livy_kernel(mock_livy.url, tmp_path) as kernel:
        out = kernel.run("x = 41 + 1", timeout_s=180)
        assert "mock Livy ran: x = 41 + 1" in _text(out), out
        kernel.km.shutdown_kernel(now=False)  # JupyterLab's "Shut Down Kernel"
    assert len(mock_livy.sessions_posted) == 1
    assert mock_livy.sessions_posted[0] == {
        **OPS_SESSION,
        "heartbeatTimeoutInSecond": 900,
        "kind": "pyspark",
    }
    assert mock_livy.deleted == [0]  # the kernel's shutdown ends the session on the cluster
    # (a killed kernel cannot: Livy ends its session after heartbeatTimeoutInSecond)


@pytest.mark.parametrize("where", ["unreachable", "not Livy"])
def test_bad_livy_url_is_a_readable_error_and_the_kernel_lives(
    where: str, mock_livy: MockLivy, tmp_path: Path
):
    if where == "unreachable":
        url = f"http://127.0.0.1:{free_port()}"
    else:  # a server that answers, but not as Livy (a wrong path: 404 for POST /sessions)
        url = f"{mock_livy.url}/gateway"
    with _livy_kernel(url, tmp_path) as kernel:
        out = kernel.run("print(1 + 1)", timeout_s=300)
        text = _text(out)
        assert "The remote Spark session could not be used" in text, out
        assert f"The Livy server is {url} (c.LivySettings.url" in text
        assert "Traceback" not in text
        assert kernel.km.is_alive()
        if where == "not Livy":
            assert "404" in text  # sparkmagic's own words: the status code and the address
        again = kernel.run("print(2)", timeout_s=120)  # the kernel still answers, and says why
        assert "The remote Spark session could not be used" in _text(again), again
        assert kernel.km.is_alive()


def test_sparkmagic_problem_names_the_interpreter_and_the_fix(tmp_path: Path):
    assert sparkmagic_problem(str(LIVY_PYTHON)) is None
    # ScaleLab's own environment has pandas 3, so no sparkmagic
    problem = sparkmagic_problem(sys.executable)
    assert problem is not None and f"not installed in {sys.executable}'s environment" in problem
    assert "c.LivySettings.kernel_python" in problem and ".venv-livy" in problem
    assert "this server's Python" in (sparkmagic_problem("") or "")
    missing = str(tmp_path / "nowhere" / "python")
    assert "cannot run" in (sparkmagic_problem(missing) or "")


@pytest.mark.asyncio
async def test_a_hub_with_livy_offers_the_remote_kernel_with_ops_settings(
    mock_livy: MockLivy, tmp_path: Path
):
    config = (
        f"c.LivySettings.url = {mock_livy.url!r}\n"
        f"c.LivySettings.kernel_python = {str(LIVY_PYTHON)!r}\n"
        f"c.LivySettings.session_configs = {OPS_SESSION!r}\n"
    )
    hub = ScaleLabUp(tmp_path / "state", extra_config=config)
    try:
        hub.start()
        hub.start_server("alice")
        specs = hub.server_api("alice", "GET", "/kernelspecs").json()["kernelspecs"]
        assert set(SPARKMAGIC_KERNELS) <= set(specs)
        assert specs["sparkmagic-pyspark"]["spec"]["display_name"] == "PySpark (remote, Livy)"
        started = hub.server_api("alice", "POST", "/kernels", json={"name": "sparkmagic-pyspark"})
        assert started.status_code == 201, started.text
        kernel_id = started.json()["id"]
        await execute(hub, "alice", kernel_id, '%%configure -f\n{"numExecutors": 2}')
        out = await execute(hub, "alice", kernel_id, "spark.range(5).count()")
        assert "mock Livy ran: spark.range(5).count()" in out["stdout"], out
        assert len(mock_livy.sessions_posted) == 1
        body = mock_livy.sessions_posted[0]
        assert body["numExecutors"] == 2 and body["queue"] == "course"
        assert body["conf"] == OPS_SESSION["conf"]
        assert hub.interrupt() == 0
    finally:
        hub.kill()
