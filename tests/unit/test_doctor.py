"""``scalelab doctor`` on a good configuration and on broken ones (real Java, Spark, proxy)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from scalelab.commands.doctor import (
    check_database,
    check_gpus,
    check_homes,
    check_java,
    check_port,
    load_settings,
)
from scalelab.commands.doctor_report import FAIL, OK, WARN, Check, exit_status, format_checks
from scalelab.common.ports import free_port


def doctor(tmp_path: Path, *args: str, env: dict[str, str] | None = None, quick: bool = True):
    """``python -m scalelab doctor`` on a fresh state folder (``--quick``: the kernels are not
    started, but where ``quick`` is False); the completed process."""
    argv = [sys.executable, "-m", "scalelab", "doctor", "--state-dir", str(tmp_path / "state")]
    argv += ["--quick"] if quick else []
    return subprocess.run(
        [*argv, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_doctor_on_a_good_configuration_passes_with_the_missing_gpu_as_a_warning(tmp_path: Path):
    store = tmp_path / "store"
    store.mkdir()
    result = doctor(tmp_path, "--port", str(free_port()), "--store", store.as_uri(), quick=False)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    names = ("Java", "Spark", "Kernels", "Homes", "Proxy", "Port", "Hub port", "Database")
    for name in (*names, "Proxy API port"):
        assert f"[ ok ] {name}: " in out, out
    # Each kernel the servers will offer started for real and answered (scalelab up's three
    # as it will write them, ipykernel's own python3), and left no file behind.
    kernels = "4 kernels start and answer: python3 "
    assert f"[ ok ] Kernels: {kernels}" in out, out
    for name in ("scalelab-pyspark", "scalelab-pytorch", "scalelab-tensorflow"):
        assert re.search(rf"\b{name} \d+\.\d s\b", out), out
    assert not (tmp_path / "state").exists()
    assert "Spark 4.3.0" in out
    # An empty store is reachable; its missing data sets are a warning with the fetch command.
    assert f"[warn] Course store: {store.as_uri()} is reachable" in out, out
    assert "lacks data sets: fashion-mnist, millionsong" in out
    assert "[warn] GPUs: no GPU" in out  # this machine has none: a warning, not a failure
    assert out.rstrip().endswith("All checks passed.")


def test_doctor_names_a_java_home_pointing_nowhere_and_fails(tmp_path: Path):
    result = doctor(tmp_path, "--port", str(free_port()), env={"JAVA_HOME": str(tmp_path / "no")})
    assert result.returncode == 1
    assert f"[FAIL] Java: JAVA_HOME={tmp_path / 'no'} has no bin/java" in result.stdout
    assert "fix: Install Java 17 or newer" in result.stdout
    assert "[FAIL] Spark: spark-submit --version failed" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_doctor_fails_on_an_unreachable_store_and_a_taken_port(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        closed = free_port()  # nothing listens there: the store server is "down"
        store = f"http://127.0.0.1:{closed}/course"
        result = doctor(tmp_path, "--port", str(port), "--store", store)
    assert result.returncode == 1
    out = result.stdout
    assert f"[FAIL] Course store: {store} cannot be read" in out
    assert "fix: Check c.ScaleLabSpawner.store_url" in out
    assert f"[FAIL] Port: port {port} on 127.0.0.1 is already in use by pid {os.getpid()}" in out
    assert "fix: Stop that program, or choose another port" in out
    assert "[ ok ] Java:" in out
    assert out.rstrip().endswith("2 check(s) failed: Course store, Port")


def test_doctor_reads_the_operators_config_file(tmp_path: Path):
    homes = tmp_path / "readonly-homes"
    homes.mkdir()
    homes.chmod(0o500)
    mine = tmp_path / "mine.py"
    mine.write_text(
        f"c.ScaleLabSpawner.home_root = {str(homes)!r}\n"
        "c.ScaleLabSpawner.declared_gpus = [{'uuid': 'GPU-fake-0'}]\n"
    )
    try:
        s = load_settings(tmp_path / "state", config_file=str(mine))
        assert s.home_root == str(homes)
        assert check_gpus(s.declared_gpus, s.exclude_gpus).status == OK
        if os.geteuid() != 0:  # root writes anywhere
            homes_check = check_homes(s.home_root)
            assert homes_check.status == FAIL and "is not writable" in homes_check.detail
    finally:
        homes.chmod(0o700)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_settings(tmp_path / "state", config_file=str(tmp_path / "missing.py"))


def test_doctor_with_a_missing_config_file_is_a_usage_error(tmp_path: Path):
    result = doctor(tmp_path, "--config", str(tmp_path / "missing.py"))
    assert result.returncode == 2
    assert "scalelab: error: cannot read the configuration" in result.stderr
    assert "Traceback" not in result.stderr


def test_java_without_java_home_or_path(tmp_path: Path):
    check = check_java({"PATH": str(tmp_path)})
    assert check.status == FAIL
    assert check.detail == "no java on PATH and JAVA_HOME is unset"


def test_database_check_on_a_sqlite_file_and_an_unwritable_folder(tmp_path: Path):
    good = check_database(f"sqlite:///{tmp_path / 'hub.sqlite'}")
    assert good.status == OK and not (tmp_path / "hub.sqlite").exists()  # nothing left behind
    (tmp_path / "file").write_text("not a folder")
    bad = check_database(f"sqlite:///{tmp_path / 'file' / 'hub.sqlite'}")
    assert bad.status == FAIL and "is not writable" in bad.detail
    remote = check_database(f"postgresql://hub:secret-pw@127.0.0.1:{free_port()}/hub")
    assert remote.status == FAIL
    assert "secret-pw" not in remote.detail and "hub:***@" in remote.detail


def test_report_and_exit_status():
    checks = [Check("A", OK, "fine"), Check("B", WARN, "meh", "do x"), Check("C", FAIL, "no", "y")]
    assert exit_status(checks) == 1
    assert exit_status(checks[:2]) == 0
    text = format_checks(checks)
    assert "[warn] B: meh\n       fix: do x" in text
    assert text.endswith("1 check(s) failed: C")


def test_port_held_by_our_own_hub_is_fine_and_anyone_elses_is_named():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        ours = check_port("127.0.0.1", port, our_pids={os.getpid()})
        theirs = check_port("127.0.0.1", port, our_pids=set())
    assert ours.status == OK and "served by this state folder's hub" in ours.detail
    assert theirs.status == FAIL
    assert theirs.detail.startswith(f"port {port} on 127.0.0.1 is already in use by pid ")
    assert theirs.detail.count(f"pid {os.getpid()}") == 1
