"""A server's cgroup on this host's real kernel: the limits hold and nothing outlives its end.

Processes join a :class:`ServerCgroup` as the spawner's server does (``preexec_fn``, as root):
one over its memory limit is killed by the kernel, one past ``pids.max`` cannot fork, and
``end`` kills a process started in a session of its own (``start_new_session``) that its parent
no longer knows. Needs root and a writable cgroup file system (CI has both): skipped otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

from scalelab.common.processes import pid_runs
from scalelab.spawner import cgroups
from scalelab.spawner.cgroups import Limits, ServerCgroup
from tests.support.cgroupfs import cgroup_of

PARENT = "scalelab-tests"


def _usable() -> str | None:
    if os.geteuid() != 0:
        return "needs root, to make cgroups"
    if cgroups.hierarchy_folders() is None:
        return "no cgroup v2 nor v1 memory/cpu/pids hierarchy on this host"
    return None


UNUSABLE = _usable()
pytestmark = pytest.mark.skipif(UNUSABLE is not None, reason=str(UNUSABLE))

MIB = 2**20


@pytest.fixture
def group() -> Iterator[ServerCgroup]:
    made = ServerCgroup(PARENT, f"t-{uuid.uuid4().hex[:12]}")
    made.create(Limits(memory_bytes=96 * MIB, cpus=0.5, tasks=40))
    yield made
    made.end()


def _run(group: ServerCgroup, code: str, **kwargs) -> subprocess.Popen:
    paths = group.join_paths()
    return subprocess.Popen(
        [sys.executable, "-c", code], preexec_fn=lambda: cgroups.join(paths), **kwargs
    )


def test_the_kernel_holds_the_memory_and_task_limits(group: ServerCgroup):
    hog = _run(group, "b = bytearray(400 * 2**20); b[::4096] = b'x' * len(b[::4096])")
    assert hog.wait(timeout=60) == -9  # the cgroup's OOM killer, not the host's
    forks = _run(
        group,
        "import subprocess\n"
        "kids = []\n"
        "try:\n"
        "    for _ in range(100): kids.append(subprocess.Popen(['sleep', '30']))\n"
        "except OSError as exc: print(len(kids), exc.errno)\n"
        "for k in kids: k.kill()\n",
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = forks.communicate(timeout=60)
    started, errno = map(int, out.split())
    assert errno == 11 and 0 < started < 40, out  # EAGAIN at pids.max, the parent counted
    # Where the process is, the limits are the kernel's own.
    probe = _run(group, "import time; time.sleep(30)")
    try:
        where = cgroup_of(probe.pid)
        key = "" if group.version == 2 else "pids"
        assert where[key] == group.folders[key]
        assert probe.pid in group.processes()
    finally:
        probe.kill()
        probe.wait()


def test_end_kills_what_left_its_session_and_removes_the_cgroup(group: ServerCgroup):
    server = _run(
        group,
        "import subprocess, sys, time\n"
        "p = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n",
        stdout=subprocess.PIPE,
        text=True,
    )
    with server.stdout:
        escaped = int(server.stdout.readline())
    assert pid_runs(escaped) and os.getsid(escaped) == escaped  # a session of its own
    assert {server.pid, escaped} <= group.processes()
    assert group.end() == set()
    assert server.wait(timeout=10) == -9
    deadline = time.monotonic() + 10
    while pid_runs(escaped) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_runs(escaped)
    assert [folder.exists() for folder in group.folders.values()] == [False] * len(group.folders)
