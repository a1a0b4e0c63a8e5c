"""A server's sandbox, its pure parts: the address pair each server takes, the mounts that give
it its own temporary folders (kept folders carried along), and when ``sandbox`` is on. The real
namespaces are tests/integration/hub/test_server_sandbox.py's; the hostile students,
tests/integration/hub/test_isolation.py's."""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from jupyterhub.spawner import SpawnException
from traitlets import TraitError
from traitlets.config import Config

from scalelab.spawner import ScaleLabSpawner, netns
from scalelab.spawner.namespaces import (
    MS_BIND,
    MS_PRIVATE,
    MS_REC,
    Mount,
    kept_mount_points,
    private_mounts,
)
from scalelab.spawner.sandbox import auto_off_reason, missing_for_sandbox

SUBNET = ipaddress.IPv4Network("10.249.0.0/16")


def test_each_server_takes_a_30_of_the_subnet_host_end_first():
    link = netns.link_for(SUBNET, 3, "scalelab-runtime-alice-x1")
    assert (str(link.host_address), str(link.server_address)) == ("10.249.0.13", "10.249.0.14")
    assert link.host_if == "slb3" and link.path == "/run/netns/scalelab-runtime-alice-x1"
    last = netns.link_for(SUBNET, netns.capacity(SUBNET) - 1, "n")
    assert str(last.server_address) == "10.249.255.254" and len(last.host_if) <= 15
    assert netns.capacity(SUBNET) == 16384
    with pytest.raises(ValueError, match=r"outside 10\.249\.0\.0/16"):
        netns.link_for(SUBNET, 16384, "n")


def test_a_start_takes_the_lowest_pair_free_on_the_host_and_in_the_hub():
    on_host = ["127.0.0.1", "10.0.0.5", "10.249.0.1", "10.249.0.9", "10.249.1.2"]
    assert netns.indexes_in(on_host, SUBNET) == {0, 2, 64}
    assert netns.free_index({0, 2, 64}, 100) == 1
    assert netns.free_index({0, 1, 2}, 100) == 3
    with pytest.raises(netns.SandboxNetworkError, match="all 2 sandbox address pairs are in use"):
        netns.free_index({0, 1}, 2)


def test_a_subnet_smaller_than_one_pair_is_refused_at_the_hubs_start():
    assert netns.parse_subnet("172.31.0.0/24").num_addresses == 256
    with pytest.raises(ValueError, match="smaller than one /30"):
        netns.parse_subnet("10.0.0.0/31")
    with pytest.raises(TraitError, match="sandbox_subnet"):
        _spawner(Path("/nonexistent"), sandbox_subnet="10.0.0.0/31")
    with pytest.raises(TraitError, match="sandbox_subnet"):
        _spawner(Path("/nonexistent"), sandbox_subnet="not a subnet")


def test_the_private_tmp_covers_every_shared_temporary_folder_and_shm():
    private = "/srv/run/scalelab-runtime-alice-x1/tmp"
    ops = private_mounts(private, ["/srv/run/scalelab-runtime-alice-x1", "/srv/course"])
    assert ops == [
        Mount("none", "/", flags=MS_REC | MS_PRIVATE),  # nothing of it reaches the host
        Mount(private, "/tmp", flags=MS_BIND | MS_REC),
        Mount(private, "/var/tmp", flags=MS_BIND | MS_REC),
        Mount("tmpfs", "/dev/shm", "tmpfs", 2 | 4, "mode=1777"),  # nosuid, nodev
    ]


def test_folders_the_hub_hands_the_server_under_tmp_stay_at_their_paths():
    runtime = "/tmp/scalelab-runtime-alice-x1"
    private = f"{runtime}/tmp"
    keep = [
        runtime,
        "/tmp/trial/state/store",
        "/tmp/trial/state/kernelspecs",
        "/tmp/trial/state",  # holds the two above: they come with it
        "/var/tmp/course",
        "/srv/homes",  # not under a shared folder: visible as it is
        f"{private}/inside",  # inside the private folder itself: nothing to do
        "",
    ]
    assert kept_mount_points(private, keep) == [
        ("/tmp/scalelab-runtime-alice-x1", f"{private}/scalelab-runtime-alice-x1"),
        ("/tmp/trial/state", f"{private}/trial/state"),
        ("/var/tmp/course", f"{private}/course"),
    ]
    ops = private_mounts(private, keep)
    binds = [(op.source, op.target) for op in ops if op.flags == MS_BIND]
    assert binds == [point for point in kept_mount_points(private, keep)]
    # the kept folders are bound before the private folder covers /tmp (their paths still
    # name the host's folders then)
    assert ops.index(Mount(private, "/tmp", flags=MS_BIND | MS_REC)) > len(binds)


def test_a_sandbox_needs_root_ip_and_the_hubs_api_on_loopback():
    url = "http://127.0.0.1:8081/hub/api"
    assert missing_for_sandbox(root=True, has_ip=True, hub_api_url=url) == ""
    assert missing_for_sandbox(root=True, has_ip=True, hub_api_url="http://localhost:8081/") == ""
    assert missing_for_sandbox(root=False, has_ip=True, hub_api_url=url) == (
        "the hub does not run as root"
    )
    assert "`ip` is not installed" in missing_for_sandbox(root=True, has_ip=False, hub_api_url=url)
    for remote in ("http://10.0.0.5:8081/hub/api", "http://hub.example.org:8081/hub/api"):
        reason = missing_for_sandbox(root=True, has_ip=True, hub_api_url=remote)
        assert reason == f"the hub's API ({remote}) is not on the host's loopback"


def test_auto_keeps_students_apart_on_a_local_course_only():
    local = {"store_url": "file:///srv/course", "spark_master": "local[*]"}
    assert auto_off_reason(as_students=True, **local) == ""
    assert auto_off_reason(as_students=False, **local) == (
        "servers share one identity (no system users)"
    )
    assert auto_off_reason(
        as_students=True, store_url="hdfs://nn:8020/course", spark_master="local[*]"
    ) == ("the course store (hdfs://nn:8020/course) is not local")
    assert auto_off_reason(as_students=True, store_url="/srv/course", spark_master="yarn") == (
        "Spark's master (yarn) is a cluster"
    )


def _spawner(tmp_path: Path, **settings) -> ScaleLabSpawner:
    c = Config()
    for key, value in settings.items():
        setattr(c.ScaleLabSpawner, key, value)
    user = SimpleNamespace(name="alice", url="/user/alice/", groups=[], admin=False)
    hub = SimpleNamespace(api_url="http://10.0.0.5:8081/hub/api")  # a hub no sandbox reaches
    spawner = ScaleLabSpawner(config=c, user=user, hub=hub)
    spawner.runtime_dir = str(tmp_path / "scalelab-runtime-alice-x1")
    return spawner


@pytest.mark.asyncio
async def test_a_server_that_must_have_a_sandbox_and_cannot_does_not_start(tmp_path: Path):
    spawner = _spawner(tmp_path, sandbox="on", store_url=str(tmp_path))
    with pytest.raises(SpawnException) as caught:
        await spawner.make_sandbox()
    message = str(caught.value)
    assert "Cannot give alice's server its sandbox: the hub" in message
    assert "docs/operators-guide.md, Isolation" in message and "sandbox = 'off'" in message
    assert spawner.sandbox_link is None and "scalelab_sandbox" not in spawner.get_state()


@pytest.mark.asyncio
async def test_auto_goes_on_without_one_and_says_so_once(tmp_path: Path, caplog):
    spawner = _spawner(tmp_path, sandbox="auto", store_url=str(tmp_path))
    spawner.log = logging.getLogger("test-sandbox-auto")
    with caplog.at_level(logging.WARNING, "test-sandbox-auto"):
        await spawner.make_sandbox()
        await spawner.make_sandbox()
    assert spawner.sandbox_link is None and spawner.ip == "127.0.0.1"  # as configured
    [record] = caplog.records
    assert record.getMessage().startswith("Servers run without a sandbox (network, /tmp): the ")
    off = _spawner(tmp_path, sandbox="off")
    await off.make_sandbox()
    assert off.sandbox_link is None and off.sandbox_entry() is None


def test_a_restarted_hub_takes_the_sandbox_back_from_the_state(tmp_path: Path):
    spawner = _spawner(tmp_path)
    spawner.load_state({"scalelab_sandbox": {"netns": "scalelab-runtime-alice-x1", "index": 5}})
    assert spawner.sandbox_link == netns.link_for(SUBNET, 5, "scalelab-runtime-alice-x1")
    assert spawner.sandbox_state() == {
        "scalelab_sandbox": {"netns": "scalelab-runtime-alice-x1", "index": 5}
    }
    spawner.load_state({})
    assert spawner.sandbox_link is None and spawner.sandbox_state() == {}


def test_scalelab_itself_is_kept_in_the_sandbox_wherever_it_is_installed(tmp_path: Path):
    import sys

    import scalelab.spawner

    kept = _spawner(tmp_path)._kept_folders()
    assert sys.prefix in kept  # the environment the server's Python runs from
    package = Path(scalelab.spawner.__file__).resolve().parent.parent
    assert str(package) in kept  # spawner/, kernels/, notebooks/... (a clone under /tmp)
