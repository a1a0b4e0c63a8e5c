"""A server's cgroup, on folders laid out as the kernel's cgroup file systems are (the files the
kernel would take are plain files here: what is written, not what the kernel does with it; the
real kernel's enforcement is tests/integration/hub/test_server_cgroup.py)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from jupyterhub.spawner import SpawnException
from traitlets.config import Config

from scalelab.common.memory_cgroup import MemoryEvents, parse_memory_events
from scalelab.spawner import ScaleLabSpawner, cgroups
from scalelab.spawner.cgroups import CgroupError, Limits, ServerCgroup


def test_limits_become_the_files_of_each_cgroup_version():
    limits = Limits(memory_bytes=2 * 2**30, cpus=1.5, tasks=4096)
    assert cgroups.v1_settings(limits) == {
        ("memory", "memory.limit_in_bytes"): "2147483648",
        ("cpu", "cpu.cfs_period_us"): "100000",
        ("cpu", "cpu.cfs_quota_us"): "150000",
        ("pids", "pids.max"): "4096",
    }
    assert cgroups.v2_settings(limits) == {
        "memory.max": "2147483648",
        "memory.swap.max": "0",
        "cpu.max": "150000 100000",
        "pids.max": "4096",
    }
    assert cgroups.v1_settings(Limits()) == cgroups.v2_settings(Limits()) == {}
    assert cgroups.cpu_quota_us(0.001) == 1000  # the kernel's minimum quota


def test_zero_or_none_from_the_spawner_means_no_limit():
    assert cgroups.limits_of(0, None, 0) == Limits()
    assert cgroups.limits_of(10**9, 2, 64) == Limits(10**9, 2.0, 64)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x" * 256])
def test_a_name_must_be_one_folder(name: str):
    with pytest.raises(CgroupError, match="not a cgroup name"):
        cgroups.check_name(name)


def _v1(root: Path) -> Path:
    for controller in cgroups.V1_CONTROLLERS:
        (root / controller).mkdir(parents=True)
        (root / controller / "cgroup.procs").write_text("")
    return root


def _v2(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    return root


def test_the_hierarchy_is_found_or_its_absence_named(tmp_path: Path):
    assert cgroups.hierarchy_folders(_v2(tmp_path / "two")) == (2, {"": tmp_path / "two"})
    version, folders = cgroups.hierarchy_folders(_v1(tmp_path / "one"))
    assert version == 1 and folders == {c: tmp_path / "one" / c for c in ("memory", "cpu", "pids")}
    (tmp_path / "one" / "pids" / "cgroup.procs").unlink()  # a v1 host without pids mounted
    assert cgroups.hierarchy_folders(tmp_path / "one") is None
    with pytest.raises(CgroupError, match="neither cgroup v2 nor v1's memory, cpu, pids"):
        ServerCgroup("scalelab", "s1", root=tmp_path / "one")


def test_v1_a_cgroup_per_controller_with_its_limits(tmp_path: Path):
    root = _v1(tmp_path)
    (root / "memory" / "scalelab" / "s1").mkdir(parents=True)  # memsw accounted on this host
    (root / "memory" / "scalelab" / "s1" / "memory.memsw.limit_in_bytes").write_text("")
    group = ServerCgroup("/scalelab/", "s1", root=root)
    group.create(Limits(memory_bytes=3 * 2**30, cpus=2, tasks=100))
    folder = {c: root / c / "scalelab" / "s1" for c in cgroups.V1_CONTROLLERS}
    assert (folder["memory"] / "memory.limit_in_bytes").read_text() == str(3 * 2**30)
    assert (folder["memory"] / "memory.memsw.limit_in_bytes").read_text() == str(3 * 2**30)
    assert (folder["cpu"] / "cpu.cfs_quota_us").read_text() == "200000"
    assert (folder["pids"] / "pids.max").read_text() == "100"
    procs = [str(folder[c] / "cgroup.procs") for c in ("memory", "cpu", "pids")]
    assert group.join_paths() == procs


def test_v2_controllers_are_handed_down_from_the_root(tmp_path: Path):
    root = _v2(tmp_path)
    (root / "course").mkdir()
    (root / "course" / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "course" / "servers").mkdir()
    (root / "course" / "servers" / "cgroup.controllers").write_text("cpu pids\n")
    group = ServerCgroup("course/servers", "s1", root=root)
    group.create(Limits(memory_bytes=10**9, tasks=50))
    assert (root / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (root / "course" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (root / "course" / "servers" / "cgroup.subtree_control").read_text() == "+cpu +pids"
    folder = root / "course" / "servers" / "s1"
    assert (folder / "memory.max").read_text() == "1000000000"
    assert (folder / "pids.max").read_text() == "50"
    assert not (folder / "memory.swap.max").exists()  # no swap accounting: not written
    assert not (folder / "cpu.max").exists()  # no CPU limit asked
    assert group.join_paths() == [str(folder / "cgroup.procs")]


def test_a_refused_write_names_the_file_and_the_way_out(tmp_path: Path):
    root = _v1(tmp_path)
    (root / "pids" / "scalelab" / "s1" / "pids.max").mkdir(parents=True)  # unwritable: a folder
    with pytest.raises(CgroupError) as caught:
        ServerCgroup("scalelab", "s1", root=root).create(Limits(tasks=10))
    message = str(caught.value)
    assert str(root / "pids" / "scalelab" / "s1" / "pids.max") in message
    assert "c.ScaleLabSpawner.cgroups = 'off'" in message


def test_ending_an_empty_cgroup_removes_its_folders(tmp_path: Path):
    root = _v1(tmp_path)
    group = ServerCgroup("scalelab", "s1", root=root)
    for folder in group.folders.values():
        folder.mkdir(parents=True)
    assert group.processes() == set()
    assert group.end() == set()
    assert [f.exists() for f in group.folders.values()] == [False, False, False]
    assert all(parent.is_dir() for parent in group.parents.values())  # the parent stays


def _spawner(tmp_path: Path, **settings) -> ScaleLabSpawner:
    c = Config()
    for key, value in settings.items():
        setattr(c.ScaleLabSpawner, key, value)
    user = SimpleNamespace(name="alice", url="/user/alice/", groups=[], admin=False)
    spawner = ScaleLabSpawner(config=c, user=user)
    spawner.runtime_dir = str(tmp_path / "scalelab-runtime-alice-x1")
    return spawner


def test_a_server_that_must_have_a_cgroup_and_cannot_does_not_start(tmp_path: Path):
    spawner = _spawner(tmp_path, cgroups="on", cgroup_parent="course/..")
    with pytest.raises(SpawnException) as caught:
        spawner._make_cgroup()
    assert "Cannot give alice's server its cgroup: '..' is not a cgroup name" in str(caught.value)
    assert spawner.cgroup_name == ""  # nothing to end, nothing in its state
    assert "scalelab_cgroup" not in spawner.get_state()


def test_auto_goes_on_without_one_and_says_so_once(tmp_path: Path, caplog):
    spawner = _spawner(tmp_path, cgroups="auto", cgroup_parent="..")
    spawner.log = logging.getLogger("test-cgroups-auto")
    with caplog.at_level(logging.WARNING, "test-cgroups-auto"):
        spawner._make_cgroup()
        spawner._make_cgroup()
    assert spawner.cgroup_name == ""
    if os.geteuid() == 0:  # as root "auto" tries, fails on the name, and warns once
        assert [r.getMessage() for r in caplog.records] == [
            "Servers run without a cgroup of their own (limits, end): '..' is not a cgroup "
            "name (one folder name, no '/')"
        ]
    else:  # not root: "auto" is off without trying
        assert caplog.records == []
    off = _spawner(tmp_path, cgroups="off")
    off._make_cgroup()
    assert off.cgroup_name == ""


def test_the_memory_controllers_counters_in_either_version():
    v1 = {
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        "memory.limit_in_bytes": "3221225472\n",
        "memory.max_usage_in_bytes": "3221000000\n",
    }
    assert parse_memory_events(v1) == MemoryEvents(2, 3 * 2**30, 3221000000)
    v2 = {
        "memory.events": "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n",
        "memory.max": "max\n",
        "memory.peak": "1048576\n",
    }
    assert parse_memory_events(v2) == MemoryEvents(1, None, 2**20)
    unlimited = {"memory.limit_in_bytes": "9223372036854771712\n"}  # v1's "no limit"
    assert parse_memory_events(unlimited) == MemoryEvents(0, None, None)


def test_a_kill_for_memory_is_told_once_with_the_limit_and_the_peak(tmp_path: Path):
    from scalelab.hub_ext.server.notices import read_notice
    from scalelab.hub_ext.server.oom_watch import OOMWatch, oom_message

    events = MemoryEvents(1, 3 * 2**30, 3 * 2**30 - 2**20)
    message = oom_message(events, 1)
    assert message.startswith(
        "A process of your server was killed for memory: your server's memory limit of 3.0 GiB "
        "was reached (it reached 3.0 GiB)."
    )
    assert "profile that has more memory" in message and "spark.stop()" in message
    assert oom_message(MemoryEvents(3, None, None), 2).startswith(
        "2 processes of your server were killed for memory: your server's memory limit was "
        "reached. "
    )
    folder = tmp_path / "cgroup"
    folder.mkdir()
    (folder / "memory.oom_control").write_text("oom_kill 4\n")  # kills before the server
    (folder / "memory.limit_in_bytes").write_text(str(2**30))
    notice = tmp_path / "notice.json"
    watch = OOMWatch(folder, str(notice), logging.getLogger("test-oom"))
    assert watch.check() is None and not notice.exists()
    (folder / "memory.oom_control").write_text("oom_kill 5\n")
    said = watch.check()
    assert said is not None and "memory limit of 1.0 GiB was reached" in said
    assert read_notice(str(notice))["message"] == said
    assert watch.check() is None  # told once
