"""A namenode that dies under a student's store: a test cluster of its own (started and stopped
here), the store working before, then every call ending with one message naming the namenode's
address and the fix, instead of hdfs-native's retries of about 3 minutes (measured by
``bench/hdfs_dead_namenode.py``; ScaleLab's default ``dfs.client.failover.max.attempts`` is 1,
see ``scalelab.store.access.hdfs.FAILOVER_ATTEMPTS``).

No wall-clock assert: each call runs in a thread that must return within a generous guard
(:data:`GUARD_S`), which only a hang exceeds.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scalelab.spawner.store_identity import HDFSUserIdentity
from scalelab.store import StoreUnavailableError, student_store
from scalelab.store.access.hdfs import FAILOVER_ATTEMPTS_KEY
from tests.support.hadoopcluster import HadoopTestCluster, running_cluster

#: Seconds a call on the dead namenode may take before the test calls it a hang: far above
#: ScaleLab's bound (about 2 s), far below hdfs-native's default retries (about 180 s).
GUARD_S = 60.0


@pytest.fixture(scope="module")
def doomed_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HadoopTestCluster]:
    """A cluster for this module only: its test stops it."""
    yield from running_cluster(tmp_path_factory.mktemp("hdfs-doomed"))


def returned_within(call: Callable[[], Any], guard_s: float = GUARD_S) -> BaseException | None:
    """Run ``call`` in a thread; the exception it raised (None if it returned). Fails the test
    if it has not returned after ``guard_s`` (the thread is left behind, a daemon)."""
    outcome: dict[str, BaseException | None] = {"error": None}

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 -- handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(guard_s)
    assert not thread.is_alive(), f"the call on the dead namenode still runs after {guard_s} s"
    return outcome["error"]


def test_a_stopped_namenode_ends_each_call_with_its_address_and_the_fix(
    doomed_cluster: HadoopTestCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    admin = doomed_cluster.webhdfs()
    root = f"/course-{uuid.uuid4().hex[:8]}"
    admin.makedirs(f"{root}/home/alice")
    admin.chown(f"{root}/home/alice", owner="alice")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(doomed_cluster.conf_dir))
    identity = HDFSUserIdentity()
    stores = {}
    for protocol, url in (
        ("hdfs", doomed_cluster.url(root)),
        ("webhdfs", doomed_cluster.webhdfs_url(root)),
    ):
        for key, value in identity.server_environment("alice", url).items():
            monkeypatch.setenv(key, value)
        stores[protocol] = student_store(
            "alice", url, identity.server_store_options("alice", url, {})
        )
        stores[protocol].pipe_file(f"home/alice/{protocol}.txt", b"before")  # alive now
    rpc, http = doomed_cluster.rpc_port, doomed_cluster.http_port

    doomed_cluster.stop()

    calls = {
        "hdfs ls": (lambda: stores["hdfs"].ls("home/alice"), f"127.0.0.1:{rpc}"),
        "hdfs read": (lambda: stores["hdfs"].cat_file("home/alice/hdfs.txt"), f"127.0.0.1:{rpc}"),
        "hdfs write": (lambda: stores["hdfs"].pipe_file("home/alice/x", b"x"), f"127.0.0.1:{rpc}"),
        "webhdfs ls": (lambda: stores["webhdfs"].ls("home/alice"), f"127.0.0.1:{http}"),
    }
    for what, (call, address) in calls.items():
        error = returned_within(call)
        assert isinstance(error, StoreUnavailableError), f"{what}: {error!r}"
        message = str(error)
        assert "\n" not in message and "Traceback" not in message, what
        assert f"the namenode at {address} does not answer" in message, f"{what}: {message}"
        assert "c.ScaleLabSpawner.store_url or HADOOP_CONF_DIR" in message, what
        assert FAILOVER_ATTEMPTS_KEY in message, what
