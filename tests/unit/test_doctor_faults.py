"""``scalelab doctor`` creates nothing, and checks every port the hub will bind.

Doctor runs before a hub exists, often as root: a check that made a folder (a local store, the
homes, the database's folder) would leave root's folders behind, anywhere a relative path
points. The snapshot tests run the real command and compare every path under a tmp folder
(kind, mode, size, mtime, content) before and after. The port tests hold real sockets on
127.0.0.1 for the ports an operator's configuration fixes.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from scalelab.commands.doctor import (
    FAIL,
    OK,
    WARN,
    check_database,
    check_homes,
    check_ports,
    check_store,
    load_settings,
)
from scalelab.commands.invocation import scalelab_command
from scalelab.common.ports import free_port

#: What ``scalelab data fetch`` puts in a store by default (the course's data sets), called as
#: the operator can (``.venv/bin/scalelab`` where ``scalelab`` is not on the PATH).
FETCH = f"{scalelab_command()} data fetch fashion-mnist millionsong --store"
#: An old mtime set on every path before a snapshot, so that any write shows, however quick.
OLD = 1_000_000_000


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` (itself included): kind and mode, size, mtime, SHA-256."""
    paths = [root, *sorted(root.rglob("*"))]
    snap = {}
    for path in paths:
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        snap[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return snap


def frozen(root: Path) -> dict[str, tuple]:
    """:func:`snapshot` after setting every mtime under ``root`` to :data:`OLD`."""
    for path in [root, *root.rglob("*")]:
        os.utime(path, (OLD, OLD), follow_symlinks=False)
    return snapshot(root)


@contextmanager
def held_ports(count: int) -> Iterator[list[int]]:
    """``count`` ports on 127.0.0.1 that this process listens on, for the block."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            socks.append(sock)
        yield [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def doctor(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m scalelab doctor ARGS`` run in ``cwd``; the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "scalelab", "doctor", "--quick", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


# --- the whole command creates nothing --------------------------------------------------------


def test_doctor_with_a_relative_store_and_a_missing_state_dir_creates_nothing(tmp_path: Path):
    before = frozen(tmp_path)
    result = doctor(
        tmp_path, "--state-dir", "state", "--store", "store", "--port", str(free_port())
    )
    assert snapshot(tmp_path) == before, "doctor changed the tmp folder"
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    store = tmp_path / "store"  # the relative path, resolved as scalelab up resolves it
    assert f"[FAIL] Course store: {store} does not exist" in out
    assert f"       fix: {FETCH} {store}\n" in out
    assert "[ ok ] Homes: " in out and "[ ok ] Database: " in out
    assert out.rstrip().endswith("1 check(s) failed: Course store"), out
    assert not store.exists() and not (tmp_path / "state").exists()


def test_doctor_on_an_existing_state_folder_changes_nothing_and_names_taken_hub_ports(
    tmp_path: Path,
):
    state = tmp_path / "state"
    (state / "homes" / "ann").mkdir(parents=True)
    (state / "store" / "datasets").mkdir(parents=True)
    (state / "store" / "datasets" / "README").write_text("course data\n")
    (state / "jupyterhub.sqlite").write_bytes(b"")  # an empty file is an empty SQLite database
    mine = tmp_path / "mine.py"
    with held_ports(2) as (hub, api):
        mine.write_text(
            f"c.JupyterHub.hub_port = {hub}\n"
            f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{api}'\n"
        )
        mine.chmod(0o600)
        before = frozen(tmp_path)
        result = doctor(
            tmp_path, "--state-dir", str(state), "--config", str(mine), "--port", str(free_port())
        )
    assert snapshot(tmp_path) == before, "doctor changed the state folder"
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    me = f"pid {os.getpid()}"
    assert f"[FAIL] Hub port: port {hub} on 127.0.0.1 is already in use by {me}" in out
    assert f"fix: Stop that program, or change c.JupyterHub.hub_port in {mine}" in out
    assert f"[FAIL] Proxy API port: port {api} on 127.0.0.1 is already in use by {me}" in out
    assert f"fix: Stop that program, or change c.ConfigurableHTTPProxy.api_url in {mine}" in out
    assert f"[warn] Course store: {(state / 'store').as_uri()} is reachable (1 entries" in out
    assert "[ ok ] Port: " in out
    assert out.rstrip().endswith("2 check(s) failed: Hub port, Proxy API port"), out


# --- the store, the homes and the database, one by one ----------------------------------------


def test_a_missing_local_store_fails_with_the_fetch_command_and_is_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    before = frozen(tmp_path)
    for url, folder in [
        ((tmp_path / "course").as_uri(), tmp_path / "course"),
        (str(tmp_path / "plain"), tmp_path / "plain"),
        ("relative/store", tmp_path / "relative" / "store"),
    ]:
        check = check_store(url, {})
        assert check.status == FAIL, check
        assert check.detail == f"{url} does not exist", check
        assert check.fix == f"{FETCH} {url}", check
        assert not folder.exists()
    assert snapshot(tmp_path) == before


def test_a_local_store_that_is_a_file_fails_and_one_that_exists_is_listed(tmp_path: Path):
    (tmp_path / "afile").write_text("not a store")
    (tmp_path / "store" / "datasets").mkdir(parents=True)
    (tmp_path / "store" / "home").mkdir()
    before = frozen(tmp_path)
    bad = check_store((tmp_path / "afile").as_uri(), {})
    good = check_store((tmp_path / "store").as_uri(), {})
    assert snapshot(tmp_path) == before
    assert bad.status == FAIL and "is not a folder" in bad.detail, bad
    # Reachable, but without the course's data sets: a warning naming them and the fetch.
    assert good.status == WARN and "reachable (2 entries at its root)" in good.detail, good
    assert "lacks data sets: fashion-mnist, millionsong" in good.detail
    assert good.fix == f"{FETCH} {(tmp_path / 'store').as_uri()}"


def test_missing_homes_are_left_to_the_first_login_and_never_created(tmp_path: Path):
    homes = tmp_path / "srv" / "homes"
    before = frozen(tmp_path)
    check = check_homes(str(homes))
    assert snapshot(tmp_path) == before
    assert check.status == OK, check
    assert f"{homes} does not exist yet" in check.detail and str(tmp_path) in check.detail
    (tmp_path / "afile").write_text("x")
    under_a_file = check_homes(str(tmp_path / "afile" / "homes"))
    assert under_a_file.status == FAIL, under_a_file


def test_existing_homes_are_checked_without_writing_into_them(tmp_path: Path):
    homes = tmp_path / "homes"
    (homes / "ann").mkdir(parents=True)
    before = frozen(tmp_path)
    check = check_homes(str(homes))
    assert snapshot(tmp_path) == before
    assert check.status == OK and check.detail == f"{homes} is writable", check


def test_the_database_check_creates_and_changes_nothing(tmp_path: Path):
    state = tmp_path / "state"
    state.mkdir()
    existing = state / "jupyterhub.sqlite"
    with sqlite3.connect(existing) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    db.close()
    missing = tmp_path / "missing-state"  # scalelab up creates its state folder
    before = frozen(tmp_path)
    checks = [
        check_database(f"sqlite:///{existing}"),
        check_database(f"sqlite:///{tmp_path / 'new.sqlite'}"),
        check_database("sqlite:///jupyterhub.sqlite", state_dir=state),  # the hub's cwd
        check_database(f"sqlite:///{missing / 'hub.sqlite'}", state_dir=missing),
    ]
    assert snapshot(tmp_path) == before
    assert [c.status for c in checks] == [OK] * 4, checks
    assert checks[2].detail == f"SQLite {existing} is writable", checks[2]


def test_a_database_folder_that_nothing_creates_fails_with_mkdir(tmp_path: Path):
    folder = tmp_path / "db"
    before = frozen(tmp_path)
    check = check_database(f"sqlite:///{folder / 'hub.sqlite'}", state_dir=tmp_path / "state")
    assert snapshot(tmp_path) == before
    assert check.status == FAIL and f"{folder} does not exist" in check.detail, check
    assert check.fix.startswith(f"mkdir -p {folder}"), check


def test_a_file_that_is_not_sqlite_fails(tmp_path: Path):
    (tmp_path / "hub.sqlite").write_text("hello, not a database")
    check = check_database(f"sqlite:///{tmp_path / 'hub.sqlite'}")
    assert check.status == FAIL and "is not a SQLite database" in check.detail, check


# --- every port the hub will bind ---------------------------------------------------------------


def _config(tmp_path: Path, text: str) -> str:
    mine = tmp_path / "mine.py"
    mine.write_text(text)
    mine.chmod(0o600)
    return str(mine)


def _by_name(checks):
    return {c.name: c for c in checks}


def test_without_a_config_only_the_public_port_is_fixed(tmp_path: Path):
    port = free_port()
    s = load_settings(tmp_path / "state", port=port)
    checks = _by_name(check_ports(s.ports, our_pids=set()))
    assert list(checks) == ["Port", "Hub port", "Proxy API port"]
    assert checks["Port"].status == OK and checks["Port"].detail == f"127.0.0.1:{port} is free"
    for name, setting in [
        ("Hub port", "c.JupyterHub.hub_port"),
        ("Proxy API port", "c.ConfigurableHTTPProxy.api_url"),
    ]:
        assert checks[name].status == OK, checks[name]
        assert "scalelab up picks a free port at start" in checks[name].detail
        assert setting in checks[name].detail


def test_the_public_port_of_a_bind_url_is_checked_not_the_default_port(tmp_path: Path):
    """An operator's ``c.JupyterHub.bind_url`` is where the hub listens (JupyterHub's own rule:
    it wins over ``ip`` and ``port``); doctor checked port 8000 instead."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        mine = _config(tmp_path, f"c.JupyterHub.bind_url = 'http://127.0.0.1:{port}/course/'\n")
        s = load_settings(tmp_path / "state", config_file=mine)
        checks = _by_name(check_ports(s.ports, our_pids=set()))
    assert checks["Port"].status == FAIL
    assert f"port {port} on 127.0.0.1 is already in use" in checks["Port"].detail
    assert "c.JupyterHub.bind_url" in checks["Port"].fix


def test_a_hub_port_or_proxy_api_port_fixed_by_the_config_and_taken_fails_naming_both(
    tmp_path: Path,
):
    with held_ports(2) as (hub, api):
        mine = _config(
            tmp_path,
            f"c.JupyterHub.hub_port = {hub}\n"
            f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{api}'\n",
        )
        s = load_settings(tmp_path / "state", port=free_port(), config_file=mine)
        theirs = _by_name(check_ports(s.ports, our_pids=set()))
        ours = _by_name(check_ports(s.ports, our_pids={os.getpid()}))
    me = f"pid {os.getpid()}"
    assert theirs["Hub port"].status == FAIL
    assert theirs["Hub port"].detail.startswith(
        f"port {hub} on 127.0.0.1 is already in use by {me}"
    )
    assert theirs["Hub port"].fix.startswith(
        f"Stop that program, or change c.JupyterHub.hub_port in {mine}"
    )
    assert theirs["Proxy API port"].status == FAIL
    assert f"port {api} on 127.0.0.1 is already in use by {me}" in theirs["Proxy API port"].detail
    assert theirs["Proxy API port"].fix.startswith(
        f"Stop that program, or change c.ConfigurableHTTPProxy.api_url in {mine}"
    )
    assert theirs["Port"].status == OK
    for name in ("Hub port", "Proxy API port"):
        assert ours[name].status == OK and "served by this state folder's hub" in ours[name].detail


def test_a_hub_bind_url_fixes_the_hub_port(tmp_path: Path):
    with held_ports(1) as (hub,):
        mine = _config(tmp_path, f"c.JupyterHub.hub_bind_url = 'http://127.0.0.1:{hub}'\n")
        s = load_settings(tmp_path / "state", port=free_port(), config_file=mine)
        check = _by_name(check_ports(s.ports, our_pids=set()))["Hub port"]
    assert check.status == FAIL and f"port {hub} on 127.0.0.1" in check.detail, check
    assert f"change c.JupyterHub.hub_bind_url in {mine}" in check.fix


def test_a_public_port_from_the_config_names_the_config_in_its_fix(tmp_path: Path):
    with held_ports(1) as (port,):
        mine = _config(tmp_path, f"c.JupyterHub.port = {port}\n")
        s = load_settings(tmp_path / "state", port=free_port(), config_file=mine)
        check = _by_name(check_ports(s.ports, our_pids=set()))["Port"]
    assert check.status == FAIL, check
    assert check.fix.startswith(f"Stop that program, or change c.JupyterHub.port in {mine}")


def test_two_of_the_hubs_own_ports_on_one_number_fail(tmp_path: Path):
    port = free_port()
    mine = _config(tmp_path, f"c.JupyterHub.hub_port = {port}\n")
    s = load_settings(tmp_path / "state", port=port, config_file=mine)
    check = _by_name(check_ports(s.ports, our_pids=set()))["Hub port"]
    assert check.status == FAIL, check
    assert f"{port} is also the public port" in check.detail, check
    assert check.fix.startswith(f"Change c.JupyterHub.hub_port in {mine}"), check


def test_a_proxy_the_hub_does_not_start_is_not_checked_for_its_ports(tmp_path: Path):
    with held_ports(2) as (port, api):
        mine = _config(
            tmp_path,
            "c.ConfigurableHTTPProxy.should_start = False\n"
            f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{api}'\n",
        )
        s = load_settings(tmp_path / "state", port=port, config_file=mine)
        checks = _by_name(check_ports(s.ports, our_pids=set()))
    assert checks["Port"].status == OK and "should_start" in checks["Port"].detail
    assert checks["Proxy API port"].status == OK


def test_a_hub_address_that_is_not_this_machines_names_its_setting(tmp_path: Path):
    mine = _config(
        tmp_path,
        "c.JupyterHub.hub_ip = '192.0.2.1'\n"  # TEST-NET-1: no host has it
        f"c.JupyterHub.hub_port = {free_port()}\n",
    )
    s = load_settings(tmp_path / "state", port=free_port(), config_file=mine)
    check = _by_name(check_ports(s.ports, our_pids=set()))["Hub port"]
    assert check.status == FAIL and check.detail.startswith("cannot listen on 192.0.2.1:"), check
    assert check.fix == f"Use an address of this machine: c.JupyterHub.hub_ip in {mine}."


def test_a_store_with_the_course_data_sets_passes_and_is_left_as_it_was(course_store: str):
    from scalelab.spawner.local import local_store_root

    folder = local_store_root(course_store)
    before = sorted((p, p.stat().st_mtime_ns) for p in folder.rglob("*"))
    check = check_store(course_store, {})
    assert check.status == OK and check.detail.endswith("; it holds the course data sets"), check
    assert sorted((p, p.stat().st_mtime_ns) for p in folder.rglob("*")) == before
