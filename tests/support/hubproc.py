"""A real ``scalelab up`` in a child process, driven through JupyterHub's REST API.

The test's own ``jupyterhub_config.py`` (given with ``--config``, as an operator would) adds a
service whose token has JupyterHub's built-in admin role, for the REST calls, and any
``extra_config`` lines of the test's (e.g. a declared GPU inventory). Its servers keep no warm
PySpark kernel unless the test asks (``warm_spark=True``, for tests that run PySpark kernels
through the hub): an idle kernel and driver JVM per server costs 15-18 s of CPU that tests of
GPUs, culling or faults never use, on the suite's 2 cores (issue 30). The servers keep the
suite's ``SPARK_SUBMIT_OPTS`` (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import requests
from tornado.httpclient import HTTPRequest
from tornado.iostream import StreamClosedError
from tornado.websocket import WebSocketClientConnection, websocket_connect

from scalelab.commands.up import find_proxy
from scalelab.commands.up_config import UpSettings, config_file_text
from scalelab.common.ports import free_port
from scalelab.kernels.specs import install_kernelspecs
from tests.support import sandboxes

#: A declared inventory of two GPUs: this machine has none, so tests name theirs as fakes.
TWO_FAKE_GPUS = (
    "c.ScaleLabSpawner.declared_gpus = [\n"
    "    {'uuid': 'GPU-fake-0000', 'name': 'fake test GPU 0', 'memory_mib': 1024},\n"
    "    {'uuid': 'GPU-fake-0001', 'name': 'fake test GPU 1', 'memory_mib': 1024},\n"
    "]\n"
)

#: The servers' argument that turns their warm PySpark kernel off
#: (``c.WarmKernelManager.warm_pyspark``).
NO_WARM_KERNEL = "--WarmKernelManager.warm_pyspark=False"


def servers_config(warm_spark: bool) -> str:
    """The test hubs' lines for their servers: :data:`NO_WARM_KERNEL`, unless ``warm_spark`` (a
    spawner class's own ``args`` setting replaces it); and ``SPARK_SUBMIT_OPTS`` passed on, so
    that their Sparks take the suite's JVM options (set by tests/conftest.py)."""
    keep = "c.Spawner.env_keep.append('SPARK_SUBMIT_OPTS')\n"
    return keep if warm_spark else keep + f"c.Spawner.args = [{NO_WARM_KERNEL!r}]\n"


# The last line of the banner: everything scalelab up prints on start is in `output` by then.
READY_LINE = "  Press Ctrl-C to stop"


class ScaleLabUp:
    """``python -m scalelab up`` with a state folder, port and password of the test's."""

    def __init__(
        self,
        state_dir: Path,
        env: dict[str, str] | None = None,
        extra_config: str = "",
        port: int | None = None,
        shared_identity: bool = True,
        warm_spark: bool = False,
    ):
        self.state_dir = state_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(12)
        self.token = secrets.token_hex(16)
        self.output: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        config = state_dir.parent / f"{state_dir.name}-operator_config.py"
        config.touch(mode=0o600)  # it names an admin token: the hub's user's alone
        config.write_text(
            "c.JupyterHub.services = [\n"
            f"    {{'name': 'scalelab-tests', 'api_token': {self.token!r}}},\n"
            "]\n"
            "c.JupyterHub.load_roles = [\n"
            "    {'name': 'admin', 'services': ['scalelab-tests']},\n"
            "]\n" + servers_config(warm_spark) + extra_config
        )
        self.argv = [
            sys.executable, "-m", "scalelab", "up",
            "--state-dir", str(state_dir),
            "--port", str(self.port),
            "--config", str(config),
            # One identity for every login (the tests' homes are under pytest's 0700 tmp folder);
            # tests/integration/hub/test_isolation.py runs system users per student instead.
            *(["--shared-identity"] if shared_identity else []),
        ]  # fmt: skip
        self.env = {**os.environ, "SCALELAB_PASSWORD": self.password, **(env or {})}
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 240) -> None:
        """Start ``scalelab up`` and wait for its "running" line."""
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
        )
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"scalelab up exited early:\n{''.join(self.output)}")
            if line.startswith(READY_LINE):
                return
        raise AssertionError(f"scalelab up did not get ready:\n{''.join(self.output)}")

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def descendants(self) -> list[psutil.Process]:
        """Every live process ``scalelab up`` started, directly or not (hub, proxy, servers,
        kernels, warm Spark drivers); one that has just ended (a zombie until its parent reaps
        it, whose command line can no longer be read) is left out."""
        assert self.proc is not None
        live = []
        for proc in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    live.append(proc)
            except psutil.NoSuchProcess:
                pass
        return live

    def interrupt(self, timeout_s: float = 240) -> int:
        """Ctrl-C: SIGINT to ``scalelab up``; returns its exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        """Cleanup after a test: kill whatever it left running (nothing, if it passed)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            procs = [*self.descendants(), psutil.Process(self.proc.pid)]
            left = sandboxes.netns_of(p.pid for p in procs)  # a killed hub removes none
            for p in procs:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(procs, timeout=10)
            sandboxes.remove(left)
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    # -- REST API ----------------------------------------------------------------------------

    @property
    def auth(self) -> dict[str, str]:
        """The Authorization header of the test service's admin token."""
        return {"Authorization": f"token {self.token}"}

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        """A hub REST call, ``path`` relative to ``/hub/api``, with the test service's token."""
        headers = {"Authorization": f"token {self.token}"}
        return requests.request(
            method, f"{self.url}/hub/api{path}", headers=headers, timeout=30, **kwargs
        )

    def server_api(self, user: str, method: str, path: str, **kwargs) -> requests.Response:
        """A call to a user's single-user server API (``/user/<name>/api<path>``)."""
        headers = {"Authorization": f"token {self.token}"}
        url = f"{self.url}/user/{user}/api{path}"
        return requests.request(method, url, headers=headers, timeout=60, **kwargs)

    def start_server(self, user: str, options: dict | None = None, timeout_s: float = 240) -> dict:
        """Create ``user`` if needed, start their default server with ``options`` (user_options)
        and wait until it is ready."""
        if self.api("GET", f"/users/{user}").status_code == 404:
            assert self.api("POST", f"/users/{user}").status_code == 201
        body = None if options is None else {"user_options": options}
        response = self.api("POST", f"/users/{user}/server", json=body)
        assert response.status_code in (201, 202), response.text
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            model = self.api("GET", f"/users/{user}").json()
            server = model.get("servers", {}).get("")
            if server and server.get("ready"):
                return server
            time.sleep(1)
        raise AssertionError(f"{user}'s server did not get ready")


@contextlib.contextmanager
def running(up: ScaleLabUp) -> Iterator[ScaleLabUp]:
    """``up`` started for the block; then Ctrl-C, which must end it cleanly (exit status 0)."""
    try:
        up.start()
        yield up
        assert up.interrupt() == 0
    finally:
        up.kill()


async def execute(
    hub: ScaleLabUp, user: str, kernel_id: str, code: str, timeout_s: float = 240
) -> dict:
    """Run ``code`` in a kernel through the server's kernel WebSocket (Jupyter messaging protocol).

    Returns ``{"status": ..., "result": text/plain of execute_result or None, "stdout": ...,
    "display": [each display_data's bundle], "error": (ename, evalue) or None}``.
    """
    url = f"ws://127.0.0.1:{hub.port}/user/{user}/api/kernels/{kernel_id}/channels"
    # tornado's default 20 s request timeout is too short for a kernel still starting (Spark,
    # torch) on a busy 2-core machine; a timed-out handshake also leaks its socket until GC.
    request = HTTPRequest(
        url,
        headers={"Authorization": f"token {hub.token}"},
        connect_timeout=60,
        request_timeout=180,
    )
    ws = await websocket_connect(request)
    msg_id = uuid.uuid4().hex
    ws.write_message(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "username": user,
                    "session": uuid.uuid4().hex,
                    "msg_type": "execute_request",
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "content": {
                    "code": code,
                    "silent": False,
                    "store_history": False,
                    "user_expressions": {},
                    "allow_stdin": False,
                },
                "channel": "shell",
            }
        )
    )
    outcome: dict = {"status": None, "result": None, "stdout": "", "error": None, "display": []}
    deadline = time.monotonic() + timeout_s
    idle = False
    try:
        while time.monotonic() < deadline:
            raw = await asyncio.wait_for(ws.read_message(), timeout=deadline - time.monotonic())
            if raw is None:
                raise AssertionError("the kernel WebSocket closed")
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "execute_result":
                outcome["result"] = content["data"].get("text/plain")
            elif kind == "display_data":
                outcome["display"].append(content["data"])
            elif kind == "stream":
                outcome[content["name"]] = outcome.get(content["name"], "") + content["text"]
            elif kind == "error":
                outcome["error"] = (content["ename"], content["evalue"])
            elif kind == "execute_reply":
                outcome["status"] = content["status"]
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
            # The reply (shell) and the idle status (iopub) arrive in either order.
            if idle and outcome["status"]:
                return outcome
    finally:
        await close_websocket(ws)
    raise AssertionError(f"no reply from the kernel in {timeout_s} s: {outcome}")


async def close_websocket(ws: WebSocketClientConnection, timeout_s: float = 10) -> None:
    """Close ``ws`` and wait until its socket is closed.

    tornado's ``close()`` only sends the close frame; the socket closes when the server answers
    (or after tornado's own 5 s abort). A caller whose event loop ends first (``asyncio.run`` in
    a thread) would leave the socket to the garbage collector, whose ResourceWarning then fails
    whichever later test it happens in.
    """
    ws.close()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if await asyncio.wait_for(ws.read_message(), deadline - time.monotonic()) is None:
                return
    except (TimeoutError, OSError, StreamClosedError):
        pass


class PlainHub:
    """``python -m jupyterhub`` on ScaleLab's generated configuration plus ``extra_config``.

    Unlike :class:`ScaleLabUp`, the hub can be stopped and started again on the same state (a
    hub restart), and ``extra_config`` may pick another spawner (a baseline for benchmarks).
    As there, servers keep no warm Spark driver unless ``warm_spark``.
    """

    def __init__(self, state: Path, extra_config: str = "", warm_spark: bool = False):
        self.state = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(16)
        self.password = secrets.token_urlsafe(12)  # every student's login (a browser test's)
        settings = UpSettings(
            state_dir=str(state),
            store_url=(state / "store").as_uri(),
            proxy_command=find_proxy(),
            hub_port=free_port(),
            proxy_api_port=free_port(),
            port=self.port,
        )
        (state / "homes").mkdir(parents=True)
        ops = state / "ops_config.py"
        ops.write_text(
            servers_config(warm_spark)
            + extra_config
            + f"c.JupyterHub.services = [{{'name': 'tests', 'api_token': {self.token!r}}}]\n"
            + "c.JupyterHub.load_roles = [{'name': 'admin', 'services': ['tests']}]\n"
        )
        install_kernelspecs(state / "share" / "jupyter")
        self.config = state / "jupyterhub_config.py"
        self.config.write_text(config_file_text(settings, str(ops)))
        self.proc: subprocess.Popen | None = None
        self.log = open(state / "hub.log", "ab")

    def start(self, user: str | None = None) -> None:
        """Start the hub (as the system user ``user``, when given: the test runs as root) and
        wait until its API answers (120 s)."""
        env = {**os.environ, "SCALELAB_PASSWORD": self.password}
        as_user = {}
        if user is not None:
            env["HOME"] = str(self.state)
            as_user = {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(self.config)],
            cwd=self.state, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True, **as_user,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/hub/api/", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            assert self.proc.poll() is None, (self.state / "hub.log").read_text()[-3000:]
            time.sleep(0.5)
        raise AssertionError("the hub did not start")

    def stop(self) -> None:
        """SIGTERM the hub; servers and proxy keep running (cleanup_* = False)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"Authorization": f"token {self.token}"}
        return requests.request(
            method, f"{self.url}/hub/api{path}", headers=headers, timeout=30, **kwargs
        )

    def start_server(self, user: str, options: dict) -> None:
        if self.api("GET", f"/users/{user}").status_code == 404:
            self.api("POST", f"/users/{user}")
        self.api("POST", f"/users/{user}/server", json={"user_options": options})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            server = self.api("GET", f"/users/{user}").json()["servers"].get("")
            if server and server["ready"]:
                return
            time.sleep(0.5)
        raise AssertionError(f"{user}'s server never got ready")

    def holders(self) -> dict[str, str | None]:
        board = self.api("GET", "/scalelab/gpus").json()
        return {g["uuid"]: g["holder"]["user"] if g["holder"] else None for g in board["gpus"]}

    def close(self) -> None:
        """Kill everything started from this state folder: hub, proxy, servers."""
        for proc in psutil.process_iter():
            try:
                env = proc.environ()
                if str(self.state) in " ".join(proc.cmdline()) or env.get("HOME", "").startswith(
                    str(self.state)
                ):
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        pid_file = self.state / "jupyterhub-proxy.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def server_process(hub: ScaleLabUp, user: str) -> psutil.Process:
    """``user``'s running single-user server process."""
    for proc in hub.descendants():
        try:
            if (
                "jupyterhub.singleuser" in proc.cmdline()
                and proc.environ().get("JUPYTERHUB_USER") == user
            ):
                return proc
        except psutil.NoSuchProcess:
            continue
    raise AssertionError(f"no running server of {user}")


def server_environ(hub: ScaleLabUp, user: str) -> dict[str, str]:
    """Environment of ``user``'s running single-user server (read through /proc)."""
    return server_process(hub, user).environ()


def progress_events(hub: ScaleLabUp, user: str, until, timeout_s: float = 60) -> list[dict]:
    """Read a pending spawn's progress events (its EventSource) until ``until(event)``."""
    url = f"{hub.url}/hub/api/users/{user}/server/progress"
    headers = {"Authorization": f"token {hub.token}"}
    events: list[dict] = []
    deadline = time.monotonic() + timeout_s
    with requests.get(url, headers=headers, stream=True, timeout=timeout_s) as response:
        assert response.status_code == 200, response.text
        for line in response.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                event = json.loads(line[len("data:") :])
                events.append(event)
                if until(event):
                    return events
            if time.monotonic() > deadline:
                break
    raise AssertionError(f"progress never showed what was awaited: {events}")


def get_as(hub: ScaleLabUp, user: str, password: str, path: str, **kwargs) -> requests.Response:
    """GET ``path`` (``/hub/...``, ``/user/...``) as ``user``, logged in through the hub's login
    form as a browser is (cookies, not a token). The session is closed before returning."""
    with requests.Session() as session:
        login = form_login(session, hub.url, user, password)
        assert login.status_code == 302, login.text
        return session.get(f"{hub.url}{path}", timeout=60, **kwargs)


def form_login(session: requests.Session, url: str, user: str, password: str) -> requests.Response:
    """Post the hub's login form at ``url`` as a browser does (its ``_xsrf`` cookie first);
    the hub's answer, a 302 when signed in."""
    session.get(f"{url}/hub/login", timeout=30)
    form = {"username": user, "password": password, "_xsrf": session.cookies.get("_xsrf")}
    return session.post(f"{url}/hub/login", data=form, timeout=60, allow_redirects=False)
