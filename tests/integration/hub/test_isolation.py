"""A hostile student on ``scalelab up`` run by root: a system user per student keeps them apart.

A real ``scalelab up`` (no ``--shared-identity``) as root makes ``jupyter-alice`` and
``jupyter-bob`` on their first start. From alice's PySpark kernel, code tries what the
isolation drill found open before (issue 11): bob's server token in ``/proc/<pid>/environ``, the
hub's and the proxy's environment, signalling bob's server, the hub's secrets in the state folder
(config, cookie secret, database, logs, the operator's ``--config`` file), bob's home, and bob's
folder in the local course store through the raw file system, ``open_store(url)`` (unguarded;
``open_store()`` is her guarded view), ``student_store("bob")``, a changed ``JUPYTERHUB_USER``
and ``store.fs``; writing into ``datasets/``. Each of the :data:`ATTEMPTS` must be refused by
the operating system; alice's own home, store folder and the data sets keep working. Each
server runs in a cgroup of its own with the hub's limits, and a process alice's kernel started
in a session of its own ends with her server.

Each server also runs in a sandbox (``c.ScaleLabSpawner.sandbox``, issue 31): from alice's
kernel, every port bob's server, kernels and Spark driver listen on (found from his namespace's
``/proc/<pid>/net/tcp``) is tried on loopback and on his sandbox address, and the host's
loopback ports but the hub's; names planted in her /tmp, /var/tmp and /dev/shm for bob and for
carol (who has not logged in) never reach them; a listener of hers on loopback gets nothing
when bob opens his own server's ``proxy/<port>`` and ``sparkui/<port>`` routes with his
credentials; her sandbox is gone when her server stops.

Needs root, to make system users (CI runs as root): skipped, with that reason, otherwise. The
users it makes are removed at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import pwd
import re
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest
import requests

from scalelab.common.ports import free_port
from scalelab.common.processes import pid_runs
from scalelab.spawner import netns
from scalelab.spawner.system_users import NO_LOGIN
from tests.support import sandboxes
from tests.support.cgroupfs import cgroup_of
from tests.support.hubproc import ScaleLabUp, execute, server_environ, server_process
from tests.support.sysusers import MARKS, remove_users

pytestmark = MARKS

STUDENTS = ("alice", "bob")
#: A kernel's ZeroMQ channels (Jupyter's messaging protocol), as its connection file names them.
CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
SECRET = "bob's secret answer 42"

#: The whole store, unguarded (an explicit URL), as ops open it: only the OS keeps alice out.
RAW_STORE = "open_store(os.environ['SCALELAB_STORE_URL'])"
#: A call to the hub's API with alice's server's own token, from her kernel.
HUB_CALL = "hub_call"
LAB1 = "lab1_millionsong_regression"
#: What alice's kernel tries; each entry: (name, Python statement that must raise).
ATTEMPTS: list[tuple[str, str]] = [
    ("bob's server environ (API token)", "open(f'/proc/{bob_pid}/environ').read()"),
    ("the hub's environ (password)", "open(f'/proc/{hub_pid}/environ').read()"),
    ("the proxy's environ (auth token)", "open(f'/proc/{proxy_pid}/environ').read()"),
    ("signal bob's server", "os.kill(bob_pid, 0)"),
    ("list the state folder", "os.listdir(state)"),
    ("generated jupyterhub_config.py", "open(f'{state}/jupyterhub_config.py').read()"),
    ("cookie secret", "open(f'{state}/jupyterhub_cookie_secret').read()"),
    ("hub database", "open(f'{state}/jupyterhub.sqlite', 'rb').read()"),
    ("hub log", "open(f'{state}/logs/jupyterhub.log').read()"),
    ("bob's server log", "open(f'{state}/logs/servers/bob/server.log').read()"),
    ("operator's --config file", "open(operator_config).read()"),
    ("list bob's home", "os.listdir(f'{state}/homes/bob')"),
    ("read bob's home file", "open(f'{state}/homes/bob/secret.txt').read()"),
    ("write into bob's home", "open(f'{state}/homes/bob/planted.py', 'w').write('x')"),
    ("raw: read bob's store file", "open(f'{store_dir}/home/bob/secret.txt').read()"),
    ("raw: list bob's store folder", "os.listdir(f'{store_dir}/home/bob')"),
    ("raw: write into datasets/", "open(f'{store_dir}/datasets/planted.csv', 'w').write('x')"),
    (
        "raw: overwrite a data set file",
        "open(f'{store_dir}/datasets/demo/part.csv', 'w').write('x')",
    ),
    ("raw: delete a data set file", "os.remove(f'{store_dir}/datasets/demo/part.csv')"),
    ("open_store(url): bob's file", f"{RAW_STORE}.cat_file('home/bob/secret.txt')"),
    ("open_store(url): write datasets/", f"{RAW_STORE}.pipe_file('datasets/x.csv', b'x')"),
    ("student_store('bob')", "student_store('bob').cat_file('home/bob/secret.txt')"),
    (
        "JUPYTERHUB_USER=bob",
        "os.environ.__setitem__('JUPYTERHUB_USER', 'bob'); "
        "student_store().cat_file('home/bob/secret.txt')",
    ),
    ("store.fs: bob's file", "store.fs.cat_file(f'{store_dir}/home/bob/secret.txt')"),
    ("/etc/shadow (not root)", "open('/etc/shadow').read()"),
    # bob's kernel's channels (ZeroMQ over Unix sockets in his runtime folder, 0700): what a
    # ZMQ SUB socket on his iopub channel would connect to, and the folder itself.
    ("list bob's runtime folder", "os.listdir(bob_runtime)"),
    ("bob's kernel connection file", "open(bob_connection).read()"),
    (
        "connect to bob's kernel iopub",
        "import socket; socket.socket(socket.AF_UNIX).connect(bob_iopub)",
    ),
    # bob's hand-in (issue 33): in the store's submissions/, which the hub alone writes.
    ("raw: list the hand-ins", "os.listdir(f'{store_dir}/submissions')"),
    ("raw: read bob's hand-in", "open(f'{store_dir}/{bob_handin}').read()"),
    ("open_store(url): bob's hand-in", f"{RAW_STORE}.cat_file(bob_handin)"),
    ("hub API: bob's hand-ins", f"{HUB_CALL}('GET', 'bob/submissions')"),
    ("hub API: hand in as bob", f"{HUB_CALL}('POST', f'bob/submissions/{{LAB1}}', b'{{}}')"),
]

#: Runs in alice's kernel: every attempt, then what alice may do; prints JSON.
PROBE = """
import json, os, urllib.request
from scalelab.store import open_store, student_store
params = json.loads({params!r})
globals().update(params)
LAB1 = {lab1!r}
def hub_call(method, path, body=None):
    url = os.environ["JUPYTERHUB_API_URL"] + "/scalelab/users/" + path
    token = {{"Authorization": "token " + os.environ["JUPYTERHUB_API_TOKEN"]}}
    request = urllib.request.Request(url, data=body, method=method, headers=token)
    return urllib.request.urlopen(request, timeout=60).read()
outcome, detail = {{}}, {{}}
for name, code in params["attempts"]:
    try:
        exec(code)
        outcome[name] = "LEAKED"
    except Exception as exc:
        outcome[name] = f"refused: {{type(exc).__name__}}"
        detail[name] = str(exc)[:200]
os.environ["JUPYTERHUB_USER"] = "alice"
mine = student_store("alice")
mine.pipe_file("home/alice/mine.txt", b"alice's")
allowed = {{
    "uid": os.getuid(),
    "home": open(os.path.expanduser("~/own.txt"), "w").write("ok"),
    "store home": mine.cat_file("home/alice/mine.txt").decode(),
    "datasets": mine.cat_file("datasets/demo/part.csv").decode(),
    "umask": oct(os.umask(0o077)),
    "spark": spark.range(10).count(),  # starts the Spark driver's JVM, as alice
}}
from scalelab.hub_ext.labs.handin_client import send
from scalelab.hub_ext.labs.sync import bundled_labs
allowed["hand-in"] = send(LAB1, bundled_labs()[LAB1 + ".ipynb"])["version"]
import tempfile
import time
from pyspark import SparkFiles
temporary = {{  # the server's own temporary folder, for Python, Spark and the driver's JVM
    "python": tempfile.gettempdir(),
    "java": spark.sparkContext._jvm.java.lang.System.getProperty("java.io.tmpdir"),
    "spark files": SparkFiles.getRootDirectory(),
}}
print(json.dumps({{"outcome": outcome, "allowed": allowed, "detail": detail, "tmp": temporary}}))
"""


#: The servers' limits in this hub (each server and all it starts: a PySpark kernel's JVM fits):
#: the profile's, over the spawner's own.
LIMITS = """
c.ScaleLabSpawner.mem_limit = "2G"
c.ScaleLabSpawner.tasks_limit = 1024
c.ScaleLabSpawner.profiles = [
    {"slug": "cpu", "default": True, "mem_limit": "3G", "cpu_limit": 1.5},
]
"""


@pytest.fixture(scope="module")
def hub() -> Iterator[ScaleLabUp]:
    remove_users(STUDENTS)
    # Not pytest's tmp_path: pytest's own folder of the user's is 0700, which the students'
    # users cannot enter (scalelab up would then run a single-user trial, see test_identity.py).
    base = Path(tempfile.mkdtemp(prefix="scalelab-isolation-"))
    base.chmod(0o711)  # as /var/lib is: others may enter it
    up = ScaleLabUp(base / "state", extra_config=LIMITS, shared_identity=False, warm_spark=True)
    try:
        up.start()
        for user in STUDENTS:
            up.start_server(user)
        yield up
        uids = {pwd.getpwnam(f"jupyter-{user}").pw_uid for user in STUDENTS}
        assert up.interrupt() == 0
        theirs = [p for p in psutil.process_iter() if p.uids().effective in uids]
        # a moment for the last ones to exit; a zombie (ended, not reaped by a PID 1 without
        # an init) runs nothing and holds nothing
        _, alive = psutil.wait_procs(theirs, timeout=5)
        left = [p.pid for p in alive if pid_runs(p.pid)]
        assert left == [], f"processes of the students' users outlived the hub: {left}"
    finally:
        up.kill()
        remove_users(STUDENTS)
        shutil.rmtree(base, ignore_errors=True)


def _hub_pids(hub: ScaleLabUp) -> tuple[int, int]:
    hub_pid = proxy_pid = 0
    for proc in hub.descendants():
        line = " ".join(proc.cmdline())
        if "-m jupyterhub -f" in line:
            hub_pid = proc.pid
        elif "configurable-http-proxy" in line:
            proxy_pid = proc.pid
    assert hub_pid and proxy_pid
    return hub_pid, proxy_pid


def test_each_student_gets_a_system_user_with_a_private_home(hub: ScaleLabUp):
    assert "Each student runs as a system user of their own" in "".join(hub.output)
    for user in STUDENTS:
        entry = pwd.getpwnam(f"jupyter-{user}")
        assert entry.pw_shell == NO_LOGIN
        home = hub.state_dir / "homes" / user
        assert entry.pw_dir == str(home)
        for folder in (home, hub.state_dir / "store" / "home" / user):
            info = folder.stat()
            assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (entry.pw_uid, 0o700), folder
        server = server_process(hub, user)
        assert server.uids().real == server.uids().effective == entry.pw_uid
        assert server.environ()["HOME"] == str(home)
    for secret in ("jupyterhub.sqlite", "jupyterhub_cookie_secret", "jupyterhub_config.py"):
        mode = stat.S_IMODE((hub.state_dir / secret).stat().st_mode)
        assert mode == 0o600, (secret, oct(mode))
    assert stat.S_IMODE(hub.state_dir.stat().st_mode) == 0o711


@pytest.mark.asyncio
async def test_alices_kernel_cannot_reach_bob_or_the_hubs_secrets(hub: ScaleLabUp):
    state, store = hub.state_dir, hub.state_dir / "store"
    (state / "homes" / "bob" / "secret.txt").write_text(SECRET)
    (store / "home" / "bob" / "secret.txt").write_text(SECRET)
    (store / "datasets" / "demo").mkdir(parents=True, exist_ok=True)
    (store / "datasets" / "demo" / "part.csv").write_text("year,loudness\n2001,-7.5\n")
    (store / "datasets" / "demo").chmod(0o755)
    (store / "datasets" / "demo" / "part.csv").chmod(0o644)
    hub_pid, proxy_pid = _hub_pids(hub)
    bob_kernel = hub.server_api("bob", "POST", "/kernels", json={"name": "scalelab-pytorch"})
    bob_runtime = Path(_state(hub, "bob")["scalelab_runtime_dir"])
    bob_connection = bob_runtime / f"kernel-{bob_kernel.json()['id']}.json"
    channels = json.loads(bob_connection.read_text())
    assert channels["transport"] == "ipc", channels  # c.ScaleLabSpawner.kernel_transport
    bob_iopub = f"{channels['ip']}-{channels['iopub_port']}"
    assert Path(bob_iopub).parent == bob_runtime
    await execute(hub, "bob", bob_kernel.json()["id"], "6 * 7")  # his kernel is up: bound
    assert Path(bob_iopub).is_socket()
    params = {
        "attempts": ATTEMPTS,
        "bob_runtime": str(bob_runtime),
        "bob_connection": str(bob_connection),
        "bob_iopub": bob_iopub,
        "bob_pid": server_process(hub, "bob").pid,
        "hub_pid": hub_pid,
        "proxy_pid": proxy_pid,
        "state": str(state),
        "store_dir": str(store),
        "operator_config": str(state.parent / f"{state.name}-operator_config.py"),
    }
    # bob hands in with his server's own token (as `scalelab submit` in his terminal does).
    bob_token = server_environ(hub, "bob")["JUPYTERHUB_API_TOKEN"]
    handed = requests.post(
        f"{hub.url}/hub/api/scalelab/users/bob/submissions/{LAB1}",
        data=(Path(__file__).parents[3] / "notebooks" / "release" / f"{LAB1}.ipynb").read_bytes(),
        headers={"Authorization": f"token {bob_token}"},
        timeout=60,
    )
    assert handed.status_code == 201, handed.text
    params["bob_handin"] = handed.json()["path"]
    kernel = hub.server_api("alice", "POST", "/kernels", json={"name": "scalelab-pyspark"})
    kernel_id = kernel.json()["id"]
    probe = PROBE.format(params=json.dumps(params), lab1=LAB1)
    out = await execute(hub, "alice", kernel_id, probe)
    assert out["error"] is None, out
    report = json.loads(out["stdout"].strip().splitlines()[-1])
    leaked = {k: v for k, v in report["outcome"].items() if not v.startswith("refused")}
    assert leaked == {}, leaked
    assert len(report["outcome"]) == len(ATTEMPTS)
    # Refused by the operating system (EACCES/EPERM, or ENOENT: bob's runtime folder and the
    # hub's files under /tmp are not in alice's sandbox's /tmp at all), not by ScaleLab's guard
    # in alice's own process (whose refusal would be a StoreAccessError).
    by_os = ("PermissionError", "FileNotFoundError")
    by_hub = {k: report["detail"][k] for k in report["outcome"] if k.startswith("hub API")}
    assert set(by_hub.values()) == {"HTTP Error 404: Not Found"}, by_hub  # JupyterHub's scopes
    other = {
        k: report["detail"][k]
        for k, v in report["outcome"].items()
        if not v.endswith(by_os) and k not in by_hub
    }
    assert other == {}, other
    alice = pwd.getpwnam("jupyter-alice")
    assert report["allowed"] == {
        "uid": alice.pw_uid,
        "home": 2,
        "store home": "alice's",
        "datasets": "year,loudness\n2001,-7.5\n",
        "umask": "0o77",
        "spark": 10,
        "hand-in": 1,  # her own, through the hub, from her sandbox
    }
    handins = store / "submissions"
    assert (handins.stat().st_uid, stat.S_IMODE(handins.stat().st_mode)) == (0, 0o700)
    # Python, Spark and the driver's JVM write temporary files in the server's own folder
    # (alice's, 0700, removed with the server), never in the /tmp bob can plant names in.
    runtime = Path(_state(hub, "alice")["scalelab_runtime_dir"])
    tmp = runtime / "tmp"
    assert report["tmp"]["python"] == report["tmp"]["java"] == str(tmp), report["tmp"]
    assert Path(report["tmp"]["spark files"]).is_relative_to(tmp), report["tmp"]
    info = tmp.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (alice.pw_uid, 0o700)
    # The kernel and its Spark driver (the JVM) run as alice's user too.
    server = server_process(hub, "alice")
    tree = server.children(recursive=True)
    assert {p.name() for p in tree} >= {"java"}, [p.cmdline()[:3] for p in tree]
    assert {p.uids().effective for p in tree} == {alice.pw_uid}
    # Everything they listen on (the Spark driver and its UI) is on her sandbox's loopback:
    # Spark's UI would bind to every interface without SPARK_LOCAL_IP. Only the server itself
    # listens on her sandbox's address, for the proxy and the hub.
    listening = sandboxes.listening(server.pid) - {(_sandbox_address(hub, "alice"), _port(hub))}
    assert len(listening) >= 2, listening  # the driver and its UI
    # The kernel's own five ZeroMQ channels are Unix sockets in her runtime folder, no ports.
    own = json.loads((runtime / f"kernel-{kernel_id}.json").read_text())
    assert own["transport"] == "ipc" and Path(own["ip"]).parent == runtime, own
    assert all(Path(f"{own['ip']}-{own[f'{c}_port']}").is_socket() for c in CHANNELS)
    outside = {(ip, port) for ip, port in listening if not _loopback(ip)}
    assert outside == set(), outside

    assert (state / "homes" / "bob" / "secret.txt").read_text() == SECRET  # nothing changed
    assert not (state / "homes" / "bob" / "planted.py").exists()
    assert (store / "datasets" / "demo" / "part.csv").read_text().startswith("year,loudness")


def test_ops_read_alices_driver_log_from_the_hub_and_nothing_bob_plants(hub: ScaleLabUp):
    """Under system users a Spark driver logs into the student's own ``~/.scalelab/logs`` (the
    hub's log folder is not theirs to write); the hub's log API serves it to admins (it was
    404). Alice's driver is the one the kernel test above started (this module's tests run in
    order, on one worker)."""
    listed = hub.api("GET", "/scalelab/logfiles/alice")
    assert listed.status_code == 200, listed.text
    drivers = [name for name in listed.json()["logs"] if name.startswith("spark-driver-")]
    assert "server.log" in listed.json()["logs"] and drivers, listed.json()
    own = hub.state_dir / "homes" / "alice" / ".scalelab" / "logs" / drivers[0]
    assert own.stat().st_uid == pwd.getpwnam("jupyter-alice").pw_uid  # written by her driver
    lines = hub.api("GET", "/scalelab/logs/alice", params={"log": drivers[0]})
    assert lines.status_code == 200, lines.text
    text = [json.loads(line)["line"] for line in lines.text.splitlines()]
    assert any("Submitted application: scalelab-" in line for line in text), text[:20]
    # Bob plants links to the hub's log in his own log folder: the hub serves neither.
    bob = pwd.getpwnam("jupyter-bob")
    folder = hub.state_dir / "homes" / "bob" / ".scalelab" / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("spark-driver-1.log", "server-copy.log"):
        (folder / name).symlink_to(hub.state_dir / "logs" / "jupyterhub.log")
        os.lchown(folder / name, bob.pw_uid, bob.pw_gid)
    assert not {"spark-driver-1.log", "server-copy.log"} & set(
        hub.api("GET", "/scalelab/logfiles/bob").json()["logs"]
    )
    planted = hub.api("GET", "/scalelab/logs/bob", params={"log": "spark-driver-1.log"})
    assert planted.status_code == 404 and "JupyterHub" not in planted.text


def test_alices_token_opens_neither_bobs_server_nor_his_hub_record(hub: ScaleLabUp):
    token = server_process(hub, "alice").environ()["JUPYTERHUB_API_TOKEN"]
    headers = {"Authorization": f"token {token}"}
    for url in (
        f"{hub.url}/user/bob/api/contents",
        f"{hub.url}/user/bob/api/kernels",
        f"{hub.url}/hub/api/users/bob",
    ):
        answer = requests.get(url, headers=headers, timeout=30, allow_redirects=False)
        assert answer.status_code in (403, 404), (url, answer.status_code)


#: Runs in alice's kernel: a listener on her loopback (kept running), then every connection to
#: bob's ports and the host's, and names planted in her temporary folders; prints JSON.
NETWORK_PROBE = """
import json, os, socket, threading
params = json.loads({params!r})
caught = []
trap = socket.socket()
trap.bind(("127.0.0.1", params["trap_port"]))
trap.listen()
def serve():
    while True:
        conn, _ = trap.accept()
        caught.append(conn.recv(4096).decode(errors="replace"))
        conn.close()
threading.Thread(target=serve, daemon=True).start()
def own_ports():
    ports = set()
    for name in ("tcp", "tcp6"):
        for line in open(f"/proc/net/{{name}}").read().splitlines()[1:]:
            fields = line.split()
            ports.add(int(fields[1].split(":")[1], 16))
    return ports
mine = own_ports()
reached, refused = [], {{}}
bob = ("127.0.0.1", params["bob_address"])
targets = [(host, port) for port in params["bob_ports"] for host in bob]
targets += [("127.0.0.1", port) for port in params["host_ports"]]
for host, port in targets:
    if host == "127.0.0.1" and port in mine:
        continue  # her own sandbox's port of that number (Spark's UI: 4040 in each)
    try:
        socket.create_connection((host, port), timeout=3).close()
        reached.append(f"{{host}}:{{port}}")
    except OSError as exc:
        refused[f"{{host}}:{{port}}"] = type(exc).__name__
for folder in ("/tmp/torchinductor_jupyter-bob", "/tmp/torchinductor_jupyter-carol"):
    os.makedirs(folder, mode=0o777, exist_ok=True)
    open(f"{{folder}}/planted.py", "w").write("raise SystemExit('planted')")
for path in ("/var/tmp/planted-for-bob", "/dev/shm/planted-for-bob"):
    open(path, "w").write("x")
devices = open("/proc/net/dev").read().splitlines()[2:]
interfaces = sorted(line.split(":")[0].strip() for line in devices)
print(json.dumps({{"reached": reached, "refused": refused, "interfaces": interfaces,
    "bob_in_proc_net": params["bob_hex"] in open("/proc/net/tcp").read()}}))
"""

#: Runs in alice's kernel after bob opened his routes: what her listener caught.
CAUGHT = "print(json.dumps(caught))"

#: Runs in bob's kernel: whether any name alice planted is in his temporary folders.
PLANTED = """
import json, os
names = ["/tmp/torchinductor_jupyter-bob", "/tmp/torchinductor_jupyter-carol",
    "/var/tmp/planted-for-bob", "/dev/shm/planted-for-bob"]
print(json.dumps({name: os.path.exists(name) for name in names}))
"""


@pytest.mark.asyncio
async def test_alice_reaches_nothing_of_bobs_network_and_plants_nothing_in_his_tmp(
    hub: ScaleLabUp,
):
    # bob's server, a kernel of his and its Spark driver (RPC, block manager, UI) listen.
    bob_kernel = hub.server_api("bob", "POST", "/kernels", json={"name": "scalelab-pyspark"})
    bob_kernel_id = bob_kernel.json()["id"]
    out = await execute(hub, "bob", bob_kernel_id, "spark.range(7).count()")
    assert out["result"] == "7", out
    bob_ports = sorted({port for _, port in sandboxes.listening(server_process(hub, "bob").pid)})
    assert len(bob_ports) >= 3, bob_ports  # his server, the driver and its UI at least
    proxy = next(p for p in hub.descendants() if "configurable-http-proxy" in " ".join(p.cmdline()))
    proxy_api = int(proxy.cmdline()[proxy.cmdline().index("--api-port") + 1])
    trap_port = free_port()
    params = {
        "bob_ports": bob_ports,
        "bob_address": _sandbox_address(hub, "bob"),
        "host_ports": [proxy_api, hub.port, _port(hub, "bob")],
        "trap_port": trap_port,
        # how bob's address reads in /proc/net/tcp (hex, the host's byte order)
        "bob_hex": socket.inet_aton(_sandbox_address(hub, "bob"))[::-1].hex().upper(),
    }
    kernel = hub.server_api("alice", "POST", "/kernels", json={"name": "scalelab-pytorch"})
    kernel_id = kernel.json()["id"]
    out = await execute(hub, "alice", kernel_id, NETWORK_PROBE.format(params=json.dumps(params)))
    assert out["error"] is None, out
    report = json.loads(out["stdout"].strip().splitlines()[-1])
    assert report["reached"] == [], report
    assert len(report["refused"]) >= 2 * len(bob_ports), report["refused"]
    assert report["interfaces"] == ["eth0", "lo"], report  # her namespace's, not the host's
    assert report["bob_in_proc_net"] is False, report  # bob's sockets are not even listed

    # bob opens his own server's routes to a loopback port: his server looks in his sandbox,
    # so alice's listener on that port number in hers never sees his credentials.
    token = server_process(hub, "bob").environ()["JUPYTERHUB_API_TOKEN"]
    headers = {"Authorization": f"token {token}", "Cookie": "jupyterhub-session-id=bobs"}
    for route in ("proxy", "sparkui"):
        answer = requests.get(
            f"{hub.url}/user/bob/{route}/{trap_port}/", headers=headers, timeout=60
        )
        assert answer.status_code >= 400, (route, answer.status_code)
    caught = await execute(hub, "alice", kernel_id, CAUGHT)
    assert json.loads(caught["stdout"].strip()) == [], caught

    # What alice planted is in her own temporary folders, not the host's nor bob's; carol,
    # who has not logged in yet, will get fresh ones too.
    for name in ("torchinductor_jupyter-bob", "torchinductor_jupyter-carol"):
        assert not (Path("/tmp") / name).exists()
    assert not Path("/var/tmp/planted-for-bob").exists()
    assert not Path("/dev/shm/planted-for-bob").exists()
    seen = await execute(hub, "bob", bob_kernel_id, PLANTED)
    assert set(json.loads(seen["stdout"].strip()).values()) == {False}, seen


#: Runs in alice's kernel: twice her server's memory limit (3 GiB), 256 MiB at a time, touched.
HOG = """
chunks = []
for _ in range(24):
    chunks.append(bytearray(256 * 2**20))
    chunks[-1][::4096] = b"x" * len(chunks[-1][::4096])
"""


def _oom_kills(hub: ScaleLabUp, user: str) -> float:
    """``scalelab_server_oom_kills`` of ``user``'s default server on the hub's /hub/metrics."""
    text = requests.get(f"{hub.url}/hub/metrics", headers=hub.auth, timeout=30).text
    found = re.search(rf'scalelab_server_oom_kills{{server="",user="{user}"}} (\S+)', text)
    return float(found[1]) if found else -1.0


@pytest.mark.asyncio
async def test_a_kernel_killed_for_memory_is_told_and_nothing_else_is_harmed(hub: ScaleLabUp):
    survivor = hub.server_api("alice", "POST", "/kernels", json={"name": "scalelab-pytorch"})
    survivor_id = survivor.json()["id"]
    assert (await execute(hub, "alice", survivor_id, "6 * 7"))["result"] == "42"
    hog = hub.server_api("alice", "POST", "/kernels", json={"name": "scalelab-pytorch"})
    hog_id = hog.json()["id"]
    bob_server = server_process(hub, "bob").pid
    assert _oom_kills(hub, "alice") == 0.0
    hogging = asyncio.ensure_future(execute(hub, "alice", hog_id, HOG, timeout_s=180))
    deadline = time.monotonic() + 120
    while await asyncio.to_thread(_oom_kills, hub, "alice") < 1 and time.monotonic() < deadline:
        await asyncio.sleep(1)
    assert not hogging.done() or hogging.exception() is not None  # it never finished its cell
    hogging.cancel()  # its kernel died mid-cell: no reply will come
    with contextlib.suppress(asyncio.CancelledError, AssertionError, asyncio.TimeoutError):
        await hogging
    assert _oom_kills(hub, "alice") >= 1  # ops see it
    time.sleep(5)  # the server's watch looks every 3 s
    # Her other kernel, her server, bob's server and the hub go on; the next cell of each of
    # her kernels says what happened, with the limit.
    out = await execute(hub, "alice", survivor_id, "6 * 7")
    assert out["result"] == "42", out
    assert "killed for memory: your server's memory limit of 3.0 GiB was reached" in out["stdout"]
    restarted = await execute(hub, "alice", hog_id, "1 + 1")
    assert restarted["result"] == "2" and "killed for memory" in restarted["stdout"], restarted
    assert pid_runs(bob_server)
    assert hub.api("GET", "/users/bob").json()["servers"][""]["ready"]


#: Runs in alice's kernel: a process in a session of its own (a daemon, `nohup ... &`), and
#: the kernel's cgroup as the kernel sees it.
ESCAPE = """
import json, subprocess
daemon = subprocess.Popen(["sleep", "600"], start_new_session=True)
print(json.dumps({"daemon": daemon.pid, "cgroup": open("/proc/self/cgroup").read()}))
"""


#: Run in alice's kernel: a process-count hog in a process of its own, which starts threads (each
#: a task of her server's cgroup, as a process is) until the kernel refuses one; prints how
#: many it got and what stopped it.
TASK_HOG = """
import subprocess, sys
hog = (
    "import threading\\n"
    "stop, started = threading.Event(), 0\\n"
    "try:\\n"
    "    while started < 5000:\\n"
    "        threading.Thread(target=stop.wait, daemon=True).start()\\n"
    "        started += 1\\n"
    "    print(started, 'no limit')\\n"
    "except RuntimeError as exc:\\n"
    "    print(started, exc)\\n"
    "stop.set()\\n"
)
print(subprocess.run([sys.executable, "-c", hog], capture_output=True, text=True).stdout)
"""


@pytest.mark.asyncio
async def test_a_task_hog_stops_at_the_servers_bound_and_harms_nothing(hub: ScaleLabUp):
    """A thread (or fork) bomb in alice's kernel stops at her server's `tasks_limit` (1024 here,
    cgroup pids.max): her kernel, her server and bob's go on."""
    kernel_id = hub.server_api("alice", "POST", "/kernels", json={}).json()["id"]
    out = await execute(hub, "alice", kernel_id, TASK_HOG)
    assert out["error"] is None, out
    started, _, said = out["stdout"].strip().splitlines()[-1].partition(" ")
    # the server, its kernels (a Spark JVM among them) and the hog share the 1024
    assert 0 < int(started) < 1024 and said == "can't start new thread", out
    again = await execute(hub, "alice", kernel_id, "6 * 7")
    assert again["result"] == "42", again
    bob_kernel = hub.server_api("bob", "POST", "/kernels", json={}).json()["id"]
    assert (await execute(hub, "bob", bob_kernel, "6 * 7"))["result"] == "42"


@pytest.mark.asyncio
async def test_alices_server_is_bounded_and_nothing_of_it_outlives_its_stop(hub: ScaleLabUp):
    """Her profile's limits hold for her server's cgroup. Last in this module: it stops alice's
    server."""
    name = _state(hub, "alice")["scalelab_cgroup"]
    assert name.startswith("scalelab-runtime-alice-"), name
    where = cgroup_of(server_process(hub, "alice").pid)
    version = 2 if "" in where and where[""].name == name else 1
    folder = {k: where["" if version == 2 else k] for k in ("memory", "cpu", "pids")}
    assert {f.name for f in folder.values()} == {name}
    assert folder["pids"].parent.name == "scalelab"  # c.ScaleLabSpawner.cgroup_parent
    if version == 1:
        limits = {
            "memory": (folder["memory"] / "memory.limit_in_bytes").read_text().strip(),
            "cpu": (folder["cpu"] / "cpu.cfs_quota_us").read_text().strip(),
            "pids": (folder["pids"] / "pids.max").read_text().strip(),
        }
        assert limits == {"memory": str(3 * 2**30), "cpu": "150000", "pids": "1024"}
    else:
        assert (folder["memory"] / "memory.max").read_text().strip() == str(3 * 2**30)
        assert (folder["cpu"] / "cpu.max").read_text().split() == ["150000", "100000"]
        assert (folder["pids"] / "pids.max").read_text().strip() == "1024"
    kernel = hub.server_api("alice", "POST", "/kernels", json={"name": "scalelab-pytorch"})
    out = await execute(hub, "alice", kernel.json()["id"], ESCAPE)
    assert out["error"] is None, out
    report = json.loads(out["stdout"].strip().splitlines()[-1])
    daemon = report["daemon"]
    assert f"/scalelab/{name}" in report["cgroup"]  # the kernel is in her server's cgroup
    assert (
        pid_runs(daemon)
        and psutil.Process(daemon).uids().effective == pwd.getpwnam("jupyter-alice").pw_uid
    )
    bob_server = server_process(hub, "bob").pid
    sandbox = _state(hub, "alice")["scalelab_sandbox"]
    host_end = Path("/sys/class/net") / netns.HOST_IF.format(sandbox["index"])
    assert (netns.NETNS_DIR / sandbox["netns"]).exists() and host_end.exists()

    assert hub.api("DELETE", "/users/alice/server").status_code in (202, 204)
    deadline = time.monotonic() + 60
    while hub.api("GET", "/users/alice").json()["servers"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert hub.api("GET", "/users/alice").json()["servers"] == {}
    assert not pid_runs(daemon)
    assert [f.exists() for f in folder.values()] == [False, False, False]
    # her sandbox went with it: namespace, veth pair, private /tmp (in her runtime folder)
    assert not (netns.NETNS_DIR / sandbox["netns"]).exists() and not host_end.exists()
    assert pid_runs(bob_server)  # bob's server, in a cgroup of its own, runs on


def _sandbox_address(hub: ScaleLabUp, user: str) -> str:
    """The address ``user``'s server listens on in its sandbox (from its state's pair)."""
    saved = _state(hub, user)["scalelab_sandbox"]
    subnet = netns.parse_subnet("10.249.0.0/16")  # c.ScaleLabSpawner.sandbox_subnet's default
    return str(netns.link_for(subnet, saved["index"], saved["netns"]).server_address)


def _port(hub: ScaleLabUp, user: str = "alice") -> int:
    """The port ``user``'s server listens on, on its sandbox's address (``JUPYTERHUB_SERVICE_URL``
    in its environment, which JupyterHub gives it from the spawner's ``ip`` and ``port``)."""
    url = urlsplit(server_process(hub, user).environ()["JUPYTERHUB_SERVICE_URL"])
    assert url.hostname == _sandbox_address(hub, user), url
    return url.port


def _state(hub: ScaleLabUp, user: str) -> dict:
    """The spawner's state of ``user``'s default server, as the hub keeps it."""
    return hub.api("GET", f"/users/{user}").json()["servers"][""]["state"]


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return (mapped or address).is_loopback
