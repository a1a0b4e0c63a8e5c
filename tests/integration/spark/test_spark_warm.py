"""The warm PySpark kernel: started ahead by a real single-user server (ScaleLab's kernel
manager), hidden until the next real request for a PySpark kernel takes it, never by two, and
gone with the server.

The parts that need no running service: ``tests/unit/test_warm_kernel.py``.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests
from jupyter_client import BlockingKernelClient

from scalelab.kernels.specs import install_kernelspecs
from scalelab.spawner.environment import server_args
from tests.integration.hub.test_full_disk import Server as JupyterServer

#: Settings that differ between any two drivers, warm or not.
PER_DRIVER = {
    "spark.app.id",
    "spark.app.startTime",
    "spark.app.submitTime",
    "spark.driver.port",
    "spark.ui.port",
    "spark.ui.proxyBase",
    "spark.driver.extraJavaOptions",  # its log4j2 file is named after the starting process
    "spark.authenticate.secret",  # a new one per application (spark_defaults.security_conf)
}


class Server(JupyterServer):
    """A ``jupyter server`` with ScaleLab's extension and kernels, Spark as a spawner sets it."""

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None) -> None:
        """``args``: more server arguments; ``env``: variables that replace the local Spark's
        below (a YARN master's, for instance)."""
        home = tmp / "home"
        home.mkdir(parents=True, exist_ok=True)
        self.runtime = tmp / "runtime"
        self.runtime.mkdir(parents=True, exist_ok=True)
        data = tmp / "share" / "jupyter"
        install_kernelspecs(data)
        (tmp / "store").mkdir(exist_ok=True)
        base = {
            "JUPYTER_PATH": str(data),
            "SCALELAB_STORE_URL": (tmp / "store").as_uri(),
            "SCALELAB_STORE_OPTIONS": "{}",
            "SCALELAB_SPARK_MASTER": "local[1]",
            "SCALELAB_SPARK_DRIVER_MEMORY": "512m",
            "SCALELAB_SPARK_CONF": "{}",
            "SCALELAB_GPUS": "",
            "SCALELAB_LOG_DIR": str(tmp / "logs"),
        }
        super().__init__(home, self.runtime, {**base, **(env or {})}, [*server_args(), *args])

    def get(self, path: str) -> dict:
        assert self.process.poll() is None, self.log.read_text()
        reply = requests.get(f"{self.url}{path}", headers=self.auth, timeout=30)
        reply.raise_for_status()
        return reply.json()

    def warm(self, state: str = "ready", timeout_s: float = 240) -> dict:
        """The warmer's status once in ``state``."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.get("/scalelab/api/spark-warm")
            if status["state"] == state or time.monotonic() > deadline:
                assert status["state"] == state, (status, self.log.read_text()[-4000:])
                return status
            time.sleep(0.5)

    def kernel(
        self, path: str = "", name: str = "scalelab-pyspark", notebook: str | None = None
    ) -> BlockingKernelClient:
        """A kernel (PySpark unless ``name`` says) started through the server's REST API, and a
        client of it (its connection file is ``kernel-<id>.json``): for the folder ``path``, or
        as JupyterLab opens a notebook, a session for the notebook at ``notebook``."""
        if notebook is None:
            body, route = {"name": name, "path": path}, "kernels"
        else:
            body = {"path": notebook, "type": "notebook", "kernel": {"name": name}}
            route = "sessions"
        reply = requests.post(f"{self.url}/api/{route}", headers=self.auth, json=body, timeout=60)
        reply.raise_for_status()
        kernel_id = reply.json()["id"] if notebook is None else reply.json()["kernel"]["id"]
        client = BlockingKernelClient(
            connection_file=str(self.runtime / f"kernel-{kernel_id}.json")
        )
        client.load_connection_file()
        # No heartbeat channel: a client without the kernel's manager judges it dead when one
        # heartbeat takes over a second (jupyter_client's HBChannel.time_to_dead), which a
        # kernel still starting on a busy host does. The server that started it knows instead.
        client.start_channels(hb=False)
        deadline = time.monotonic() + 120
        while True:
            try:
                client.wait_for_ready(timeout=5)
                return client
            except RuntimeError:  # no kernel_info reply yet
                model = requests.get(
                    f"{self.url}/api/kernels/{kernel_id}", headers=self.auth, timeout=30
                )
                alive = model.ok and model.json()["execution_state"] != "dead"
                if not alive or time.monotonic() > deadline:
                    client.stop_channels()  # open sockets would hang the test process's exit
                    raise AssertionError(
                        f"kernel {kernel_id} ({name}) not ready: {model.status_code} "
                        f"{model.text}\n{self.log.read_text()[-4000:]}"
                    ) from None


def result(client: BlockingKernelClient, code: str) -> object:
    """The value of ``code``'s last line, as JSON, in the kernel of ``client``."""
    out: dict = {}

    def hook(msg: dict) -> None:
        if msg["msg_type"] == "execute_result":
            out["value"] = msg["content"]["data"]["text/plain"]
        elif msg["msg_type"] == "error":
            out["error"] = msg["content"]["traceback"]

    client.execute_interactive(code, timeout=300, output_hook=hook)
    assert "error" not in out, "\n".join(out["error"])
    return json.loads(ast.literal_eval(out["value"]))  # the repr of a JSON string


DRIVER_FACTS = """
import json, os
_counts = spark.range(3).count(), spark.sql("select 1").count()
_conf = dict(spark.sparkContext.getConf().getAll())  # after SQL ran: its warehouse folder
_worker = spark.sparkContext.parallelize([0], 1).map(
    lambda _: (os.getcwd(), os.environ.get("SCALELAB_STORE_URL"), os.environ.get("PYSPARK_PYTHON"))
).collect()[0]
json.dumps({"app_id": spark.sparkContext.applicationId, "conf": _conf, "worker": _worker,
            "counts": _counts})
"""


def jvms(server: Server) -> set[int]:
    """Pids of the Spark driver JVMs that ``server`` started, through keepers or kernels."""
    found = set()
    for proc in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if any("SparkSubmit" in part for part in proc.cmdline()):
                found.add(proc.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def execute(client: BlockingKernelClient, code: str) -> tuple[int, str]:
    """The execution count ``code`` got in the kernel of ``client``, and what it printed."""
    out: list[str] = []

    def hook(msg: dict) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    reply = client.execute_interactive(code, timeout=300, output_hook=hook)
    assert reply["content"]["status"] == "ok", reply["content"]
    return reply["content"]["execution_count"], "".join(out)


def kernel_ids(server: Server) -> set[str]:
    return {k["id"] for k in server.get("/api/kernels")}


def logs(server: Server) -> set[str]:
    return {log["name"] for log in server.get("/scalelab/api/logs")["logs"]}


def test_the_next_notebook_takes_the_warm_kernel_a_second_one_starts_its_own(tmp_path: Path):
    server = Server(tmp_path, "--WarmKernelManager.rewarm_delay_s=600")  # no next one here
    clients = []
    try:
        warm = server.warm("ready")
        assert warm["cwd"] == os.path.realpath(server.home) and warm["app_id"]
        assert warm["pid"] in {p.pid for p in psutil.Process(server.process.pid).children()}
        assert kernel_ids(server) == set()  # nobody's yet: not in the REST API
        log_name = f"spark-driver-{warm['pid']}.log"  # nor its driver's log in the list
        assert (tmp_path / "logs" / log_name).is_file() and log_name not in logs(server)
        first = server.kernel(notebook="lab1.ipynb")  # as JupyterLab opens a notebook
        clients.append(first)
        # The warm-up left nothing: the notebook's first cell is number 1, shows the banner.
        count, printed = execute(first, "print(__session__)")
        assert count == 1, printed
        assert printed.startswith("ScaleLab pyspark kernel: CPU only\n"), printed
        assert printed.endswith("lab1.ipynb\n"), printed  # the notebook's path, as set at start
        took = result(first, DRIVER_FACTS)
        assert took["app_id"] == warm["app_id"]  # the warmed kernel's own Spark
        assert result(first, "import json, os\njson.dumps(os.getpid())") == warm["pid"]
        assert "Submitted application: scalelab-" in (tmp_path / "logs" / log_name).read_text()
        assert kernel_ids(server) == {warm["kernel_id"]}  # listed from the hand-over on
        assert log_name in logs(server)
        status = server.warm("waiting")
        assert status["taken"] == 1 and status["kernel_id"] is None  # handed over, to one
        second = server.kernel()
        clients.append(second)
        cold = result(second, DRIVER_FACTS)
        assert cold["app_id"] != took["app_id"]  # its own driver: never a shared one
        assert server.warm("waiting")["taken"] == 1
        assert took["counts"] == cold["counts"] == [3, 1]
        # The same settings as a kernel started on request, but for what differs per driver.
        assert {k: v for k, v in took["conf"].items() if k not in PER_DRIVER} == {
            k: v for k, v in cold["conf"].items() if k not in PER_DRIVER
        }
        assert took["worker"] == cold["worker"]  # the Python workers' folder and environment
        assert took["worker"][0] == os.path.realpath(server.home)
        assert len(kernel_ids(server)) == 2
        running = jvms(server)
        assert len(running) == 2  # the taken kernel's and the second's
    finally:
        for client in clients:
            client.stop_channels()
        server.stop()
    _, alive = psutil.wait_procs(
        [psutil.Process(p) for p in running if psutil.pid_exists(p)], timeout=60
    )
    assert not alive, f"JVMs left after the server stopped: {alive}"


def test_a_warm_kernel_nobody_took_is_never_culled_and_ends_with_its_server(tmp_path: Path):
    culling = [
        "--ScaleLabKernelManager.cull_idle_timeout=2",
        "--ScaleLabKernelManager.cull_interval=1",
        "--ScaleLabKernelManager.cull_connected=True",
    ]
    server = Server(tmp_path, *culling)
    try:
        warm = server.warm("ready")
        processes = [psutil.Process(warm["pid"]), *(psutil.Process(p) for p in jvms(server))]
        assert len(processes) == 2  # the kernel and its driver JVM
        time.sleep(5)  # idle well past the timeout, three culls: not the warm kernel
        assert server.warm("ready")["kernel_id"] == warm["kernel_id"]
        assert all(p.is_running() for p in processes)
        assert "Culling '" not in server.log.read_text()  # as "Culling 'idle' kernel"
    finally:
        server.stop()
    _, alive = psutil.wait_procs(processes, timeout=60)
    assert not alive, "the warm kernel or its JVM outlived its server"


def test_a_warm_kernel_that_died_is_not_handed_over_and_the_request_gets_its_own(
    tmp_path: Path,
):
    once = "--KernelRestarter.restart_limit=0"  # a dead kernel is removed, not restarted
    server = Server(tmp_path, once, "--WarmKernelManager.rewarm_delay_s=600")
    client = None
    try:
        warm = server.warm("ready")
        psutil.Process(warm["pid"]).kill()
        deadline = time.monotonic() + 60
        while f"Kernel {warm['kernel_id']} died" not in server.log.read_text():
            assert time.monotonic() < deadline, server.log.read_text()[-4000:]
            time.sleep(0.5)
        client = server.kernel()  # not the dead one, and no error: a kernel of its own
        assert result(client, "import json, os\njson.dumps(os.getpid())") != warm["pid"]
        assert kernel_ids(server) == {Path(client.connection_file).stem.removeprefix("kernel-")}
        assert "ScaleLab: the warm PySpark kernel does not fit" in server.log.read_text()
    finally:
        if client is not None:
            client.stop_channels()
        server.stop()


def test_the_harness_waits_for_a_kernel_slow_to_start_and_sees_one_that_dies(tmp_path: Path):
    """The harness's own regression test (a CI run judged a starting kernel dead after its
    client's one-second heartbeat): a kernel 7 s slow to answer (longer than one 5 s wait) is
    waited for; a kernel that exits is reported as not ready, with the server's log."""
    allowed = [f"--KernelSpecManager.allowed_kernelspecs={name}" for name in ("slow", "dies")]
    once = "--KernelRestarter.restart_limit=0"  # a dead kernel is not started again
    server = Server(tmp_path, "--WarmKernelManager.warm_pyspark=False", once, *allowed)
    kernels = tmp_path / "share" / "jupyter" / "kernels"
    # Slow after binding its ports (IPKernelApp runs exec_lines once its sockets are bound,
    # before it answers): a sleep before the bind would let another process take the ports the
    # server chose meanwhile ("Address already in use", seen once on a busy CI host).
    launch = (
        f"exec {sys.executable} -m ipykernel_launcher -f {{connection_file}} "
        "'--IPKernelApp.exec_lines=import time; time.sleep(7)'"
    )
    for name, command in {"slow": launch, "dies": "exit 3"}.items():
        (kernels / name).mkdir()
        spec = {"argv": ["sh", "-c", command], "display_name": name, "language": "python"}
        (kernels / name / "kernel.json").write_text(json.dumps(spec))
    try:
        assert server.warm("off")["why"] == "off (c.WarmKernelManager.warm_pyspark = False)"
        slow = server.kernel(name="slow")
        assert result(slow, "import json\njson.dumps(6 * 7)") == 42
        slow.stop_channels()
        with pytest.raises(AssertionError, match=r"\(dies\) not ready"):
            server.kernel(name="dies")
    finally:
        server.stop()


def test_a_notebook_in_another_folder_starts_its_own_and_the_next_warm_kernel_is_for_there(
    tmp_path: Path,
):
    server = Server(tmp_path, "--WarmKernelManager.rewarm_delay_s=0")
    (server.home / "lab").mkdir()
    clients = []
    try:
        first_warm = server.warm("ready")
        elsewhere = server.kernel(notebook="lab/notebook.ipynb")  # its folder: home/lab
        clients.append(elsewhere)
        own = result(elsewhere, DRIVER_FACTS)
        assert own["app_id"] != first_warm["app_id"]  # not taken: a kernel of its own
        assert own["worker"][0] == os.path.realpath(server.home / "lab")
        try:  # the one for home was ended
            _, alive = psutil.wait_procs([psutil.Process(first_warm["pid"])], timeout=60)
        except psutil.NoSuchProcess:
            alive = []
        assert not alive
        deadline = time.monotonic() + 240
        while (status := server.warm("ready"))["cwd"] != os.path.realpath(server.home / "lab"):
            assert time.monotonic() < deadline, status
            time.sleep(1)
        assert status["app_id"] != first_warm["app_id"] and status["taken"] == 0
        again = server.kernel(notebook="lab/other.ipynb")  # a second notebook in that folder
        clients.append(again)
        took = result(again, DRIVER_FACTS)
        assert took["app_id"] == status["app_id"] and took["worker"] == own["worker"]
        after = server.get("/scalelab/api/spark-warm")  # and the next one is on its way
        assert after["taken"] == 1 and after["state"] in ("starting", "ready"), after
    finally:
        for client in clients:
            client.stop_channels()
        server.stop()
