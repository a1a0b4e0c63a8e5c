"""A server's sandbox on this host's real kernel: network namespaces, veth pairs, the hub's relay
and the private temporary folders, as the spawner makes them (:mod:`scalelab.spawner.sandbox`).

Two sandboxes, A and B: the host reaches a server in A on A's address; from A, B's server, the
host's loopback and the outside are out of reach, the relay carries exactly its ports; a process
entering A's mounts writes its own /tmp, /var/tmp and /dev/shm and still finds its runtime
folder at its path. Needs root and iproute2 (CI has both): skipped otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from scalelab.spawner import netns
from scalelab.spawner.host_relay import HostRelay
from scalelab.spawner.namespaces import (
    CLONE_NEWNET,
    enter_private_mounts,
    kept_mount_points,
    private_mounts,
    setns,
)
from scalelab.spawner.sandbox import claim_link, install_folders, release_link

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2's ip"
)

#: Not the spawner's default subnet, so that a hub test beside this one never meets these.
SUBNET = netns.parse_subnet("10.248.0.0/24")


@pytest.fixture
def pair() -> Iterator[tuple[netns.SandboxLink, netns.SandboxLink]]:
    tag = uuid.uuid4().hex[:8]
    a = claim_link(SUBNET, f"scalelab-test-a-{tag}")
    b = claim_link(SUBNET, f"scalelab-test-b-{tag}")
    yield a, b
    for link in (a, b):
        release_link(link)


def _in(link: netns.SandboxLink, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: setns(link.path, CLONE_NEWNET),
        capture_output=True,
        text=True,
        timeout=60,
    )


CONNECT = """
import socket
for target in {targets!r}:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        print(target, "reached")
    except OSError as exc:
        print(target, type(exc).__name__)
"""


def _listen(host: str) -> socket.socket:
    server = socket.socket()
    server.bind((host, 0))
    server.listen()
    threading.Thread(target=_answer, args=(server,), daemon=True).start()
    return server


def _answer(server: socket.socket) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        conn.sendall(b"host")
        conn.close()


def test_the_host_reaches_the_server_and_the_server_nothing_of_another(pair):
    a, b = pair
    # a server in B (the victim) and one in A, each on its sandbox's address
    server_b = subprocess.Popen(
        [sys.executable, "-m", "http.server", "18123", "--bind", str(b.server_address)],
        preexec_fn=lambda: setns(b.path, CLONE_NEWNET),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    host_loopback = _listen("127.0.0.1")
    try:
        seen = _in(b, "import socket; print(socket.if_nameindex())")
        assert "eth0" in seen.stdout and "lo" in seen.stdout, seen
        for _ in range(50):  # the host (the proxy) reaches B's server on its address
            try:
                socket.create_connection((str(b.server_address), 18123), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError("the host does not reach the server in its sandbox")
        port = host_loopback.getsockname()[1]
        targets = [
            f"{b.server_address}:18123",  # another sandbox's server
            f"127.0.0.1:{port}",  # the host's loopback (A's own loopback here)
            f"{b.host_address}:{port}",
            "192.0.2.1:80",  # beyond the host (TEST-NET-1)
        ]
        out = _in(a, CONNECT.format(targets=targets))
        assert out.returncode == 0, out.stderr
        results = dict(line.split() for line in out.stdout.splitlines())
        assert "reached" not in results.values(), results
        assert set(results) == set(targets)
        # no IPv6 address on either end (nothing reachable through link-local addresses)
        six = subprocess.run(
            ["ip", "-n", a.netns, "-6", "addr", "show", "dev", "eth0"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert "inet6" not in six.stdout
        forwarding = Path("/proc/sys/net/ipv4/conf", a.host_if, "forwarding").read_text()
        assert forwarding.strip() == "0"
    finally:
        server_b.kill()
        server_b.wait()
        host_loopback.close()


@pytest.mark.asyncio
async def test_the_relay_carries_its_ports_of_the_hosts_loopback_and_no_other(pair):
    a, _ = pair
    carried, other = _listen("127.0.0.1"), _listen("127.0.0.1")
    carried_port, other_port = carried.getsockname()[1], other.getsockname()[1]
    relay = HostRelay(a.path, [carried_port], logging.getLogger("test-relay"))
    await relay.start()
    code = (
        "import socket\n"
        f"print(socket.create_connection(('127.0.0.1', {carried_port}), timeout=5).recv(10))\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {other_port}), timeout=3)\n"
        "    print('reached')\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", a.netns, sys.executable, "-c", code,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert out.decode().split() == ["b'host'", "ConnectionRefusedError"], err.decode()
    finally:
        relay.close()
        carried.close()
        other.close()
    assert not relay.running


def test_a_server_has_its_own_temporary_folders_and_keeps_its_runtime_folder(pair):
    a, _ = pair
    runtime = Path(tempfile.mkdtemp(prefix="scalelab-runtime-test-"))
    private = runtime / "tmp"
    private.mkdir()
    (runtime / "kernel-1.json").write_text("{}")
    keep = [str(runtime), *install_folders()]  # this Python too (a clone under /tmp: CI's)
    for _, point in kept_mount_points(str(private), keep):
        os.makedirs(point)
    ops = private_mounts(str(private), keep)
    marker = f"scalelab-sandbox-{uuid.uuid4().hex[:8]}"
    code = (
        "import os, sys\n"
        f"open('/tmp/{marker}', 'w').write('x')\n"
        f"open('/dev/shm/{marker}', 'w').write('x')\n"
        f"print(os.path.exists('{runtime}/kernel-1.json'), os.listdir('/dev/shm'))\n"
    )

    def enter() -> None:
        setns(a.path, CLONE_NEWNET)
        enter_private_mounts(ops)

    try:
        out = subprocess.run(
            [sys.executable, "-c", code], preexec_fn=enter, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().split(maxsplit=1) == ["True", f"['{marker}']"]  # fresh shm
        assert (private / marker).exists()  # its /tmp is the private folder
        assert not (Path("/tmp") / marker).exists() and not (Path("/dev/shm") / marker).exists()
    finally:
        shutil.rmtree(runtime)


def test_deleting_a_sandbox_removes_its_namespace_and_pair():
    link = claim_link(SUBNET, f"scalelab-test-c-{uuid.uuid4().hex[:8]}")
    assert Path(link.path).exists() and Path("/sys/class/net", link.host_if).exists()
    release_link(link)
    assert not Path(link.path).exists() and not Path("/sys/class/net", link.host_if).exists()
    release_link(link)  # twice: nothing left to do, no error
