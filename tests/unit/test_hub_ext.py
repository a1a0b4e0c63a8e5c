"""``scalelab up``'s pure parts and guards; lab distribution into a home."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import scalelab
from scalelab.cli import main
from scalelab.commands.up import (
    StateLock,
    UpError,
    _log_tail,
    absolute_store_url,
    check_port_free,
    data_hint,
    free_port,
    listener_pid,
    resolve_password,
    up_settings,
    wait_ready,
)
from scalelab.commands.up_config import UpSettings, config_file_text, embedded_config
from scalelab.hub_ext.labs.sync import bundled_labs, sync_labs


def _settings(tmp_path: Path) -> UpSettings:
    return UpSettings(
        state_dir=str(tmp_path),
        store_url=(tmp_path / "store").as_uri(),
        proxy_command=["/usr/bin/configurable-http-proxy"],
        hub_port=18081,
        proxy_api_port=18001,
    )


def test_embedded_config_serves_loopback_with_password_and_scalelab_spawner(tmp_path: Path):
    c = scalelab.configure(embedded_config(_settings(tmp_path), "s3cret-pass"))
    assert (c.JupyterHub.ip, c.JupyterHub.port) == ("127.0.0.1", 8000)
    assert c.JupyterHub.db_url == f"sqlite:///{tmp_path / 'jupyterhub.sqlite'}"
    assert c.JupyterHub.authenticator_class == "shared-password"
    assert c.SharedPasswordAuthenticator.user_password == "s3cret-pass"
    assert c.JupyterHub.spawner_class == "scalelab"
    assert c.ScaleLabSpawner.home_root == str(tmp_path / "homes")
    assert c.ScaleLabSpawner.spark_master == "local[*]"
    assert c.ConfigurableHTTPProxy.api_url == "http://127.0.0.1:18001"


def test_generated_config_file_never_holds_the_password(tmp_path: Path):
    text = config_file_text(_settings(tmp_path), operator_config=None)
    assert "os.environ['SCALELAB_PASSWORD']" in text
    assert "load_subconfig" not in text
    mine = tmp_path / "mine.py"
    assert f"load_subconfig({str(mine)!r})" in config_file_text(_settings(tmp_path), str(mine))


def test_settings_round_trip_through_json(tmp_path: Path):
    s = _settings(tmp_path)
    assert UpSettings.from_json(s.to_json()) == s


def test_password_rules(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SCALELAB_PASSWORD", raising=False)
    generated, was_generated = resolve_password(None)
    assert was_generated and len(generated) >= 12
    assert resolve_password("long-enough") == ("long-enough", False)
    monkeypatch.setenv("SCALELAB_PASSWORD", "from-the-env")
    assert resolve_password(None) == ("from-the-env", False)
    with pytest.raises(UpError, match="given by --password has 5 characters; it needs at least 8"):
        resolve_password("short")
    monkeypatch.setenv("SCALELAB_PASSWORD", "short12")
    with pytest.raises(UpError, match="given by SCALELAB_PASSWORD has 7 characters"):
        resolve_password(None)


@pytest.mark.parametrize("blank", ["         ", " \t\n        "])
def test_a_whitespace_password_is_refused_from_the_env_and_the_option(
    blank: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("SCALELAB_PASSWORD", blank)
    with pytest.raises(UpError) as info:
        resolve_password(None)
    assert str(info.value) == (
        f"the password given by SCALELAB_PASSWORD is only whitespace ({len(blank)} characters); "
        "it needs at least 8 characters besides spaces. Choose one, or unset SCALELAB_PASSWORD "
        "to get a generated one."
    )
    monkeypatch.delenv("SCALELAB_PASSWORD")
    with pytest.raises(UpError, match=r"given by --password is only whitespace .*leave --pass"):
        resolve_password(blank)


def test_an_empty_password_option_is_refused_not_replaced_by_a_generated_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("SCALELAB_PASSWORD", "from-the-env")  # not used instead either
    with pytest.raises(UpError) as info:
        resolve_password("")
    assert str(info.value) == (
        "the password given by --password is empty; it needs at least 8 characters besides "
        "spaces. Choose one, or leave --password out to get a generated one."
    )
    state = tmp_path / "state"
    assert (
        main(["up", "--state-dir", str(state), "--port", str(free_port()), "--password", ""]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("scalelab: error: the password given by --password is empty;")
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_second_lock_on_a_state_folder_names_the_owner(tmp_path: Path):
    first = StateLock(tmp_path / "scalelab-up.lock")
    first.acquire("http://127.0.0.1:8000/")
    try:
        with pytest.raises(UpError, match=r"already running .*pid \d+, http://127.0.0.1:8000/"):
            StateLock(tmp_path / "scalelab-up.lock").acquire("http://127.0.0.1:8000/")
    finally:
        first.release()
    again = StateLock(tmp_path / "scalelab-up.lock")
    again.acquire("x")
    again.release()


def test_busy_port_is_reported_with_the_fix():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(
            UpError, match=rf"port {port} on 127.0.0.1 is already in use.*--port"
        ) as info:
            check_port_free("127.0.0.1", port)
        assert f"by pid {os.getpid()} (" in str(info.value)  # who holds it: this test


def test_labs_are_copied_once_and_a_student_copy_is_never_touched(tmp_path: Path):
    labs = bundled_labs()
    assert set(labs) == {
        "lab1_millionsong_regression.ipynb",
        "lab2_fashion_mnist_convnet.ipynb",
        "lab3_distributed_training.ipynb",
    }
    (tmp_path / "lab1_millionsong_regression.ipynb").write_text("my own work")
    beside = "lab1_millionsong_regression (v2).ipynb"  # the release, beside the student's file
    report = sync_labs(tmp_path)
    assert (report.copied, report.updated, report.beside) == (
        ["lab2_fashion_mnist_convnet.ipynb", "lab3_distributed_training.ipynb"],
        [],
        [beside],
    )
    assert (tmp_path / "lab1_millionsong_regression.ipynb").read_text() == "my own work"
    assert (tmp_path / "lab2_fashion_mnist_convnet.ipynb").read_bytes() == labs[
        "lab2_fashion_mnist_convnet.ipynb"
    ]
    again = sync_labs(tmp_path)
    assert again.copied + again.updated + again.beside == []
    files = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    assert files == sorted([*labs, beside])  # no temporary files left


def test_cli_errors_are_one_line_without_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    assert main(["data", "fetch", "imagenet", "--store", tmp_path.as_uri()]) == 2
    err = capsys.readouterr().err
    assert (
        err.strip()
        == "scalelab: error: unknown data set(s): imagenet; known: fashion-mnist, millionsong, "
        "msd-full"
    )
    assert main(["data", "fetch", "millionsong", "--mirror", str(tmp_path / "nope")]) == 2
    assert "nope does not exist: give a folder" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["data", "fetch", "millionsong", "--mirror", str(tmp_path / "file")]) == 2
    assert "file is not a folder" in capsys.readouterr().err
    assert main(["up", "--state-dir", str(tmp_path), "--config", str(tmp_path / "missing.py")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_fetch_reports_a_corrupt_mirror_with_exit_status_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
):
    mirror = tmp_path / "mirror" / "millionsong"
    mirror.mkdir(parents=True)
    (mirror / "millionsong.txt").write_text("2001.0,0.5\n")
    store = (tmp_path / "store").as_uri()
    assert (
        main(
            ["data", "fetch", "millionsong", "--mirror", str(tmp_path / "mirror"), "--store", store]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("scalelab: error: refused millionsong/millionsong.txt from the mirror")
    assert "Traceback" not in err


def test_data_hint_names_the_missing_sets_and_the_command(tmp_path: Path, course_store: str):
    store = (tmp_path / "empty-store").as_uri()
    hint = data_hint(store)
    assert hint is not None
    assert "not in the store yet: fashion-mnist, millionsong" in hint
    # not the default store (`scalelab up --state-dir X`): the command names it, so a fetch
    # run as printed fills the running hub's store
    assert f"scalelab data fetch fashion-mnist millionsong --store {store}    (add" in hint
    assert data_hint(course_store) is None


def test_data_hint_leaves_out_the_default_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SCALELAB_STATE_DIR", str(tmp_path))
    hint = data_hint((tmp_path.resolve() / "store").as_uri())
    assert hint is not None
    assert "scalelab data fetch fashion-mnist millionsong    (add --mirror DIR" in hint


def test_the_fetch_command_is_the_one_beside_this_python_when_not_on_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A newcomer copied the banner's `scalelab data fetch ...` and found no `scalelab` on the
    PATH: the README installs it as .venv/bin/scalelab."""
    from scalelab.commands.invocation import scalelab_command

    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "scalelab").write_text("#!/bin/sh\n")
    (venv_bin / "scalelab").chmod(0o755)
    monkeypatch.setattr("sys.executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert scalelab_command() == str(venv_bin / "scalelab")
    monkeypatch.setenv("PATH", f"{venv_bin}:/usr/bin:/bin")
    assert scalelab_command() == "scalelab"


@pytest.mark.parametrize("port", ["99999", "-1", "0", "http"])
def test_bad_port_is_a_usage_error(port: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as info:
        main(["up", f"--port={port}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --port:" in err and "is not a port number" in err
    assert "Traceback" not in err


def test_a_port_taken_by_another_program_during_start_is_not_reported_as_ready(tmp_path: Path):
    # Another web server that answers /hub/api/ grabs the port; our "hub" is a plain child process.
    (tmp_path / "hub" / "api").mkdir(parents=True)
    (tmp_path / "hub" / "api" / "index.html").write_text("{}")
    port = free_port()
    other = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = wait_ready(f"http://127.0.0.1:{port}/", port, ours, threading.Event())
        assert state == "taken"
        assert listener_pid(port) == other.pid
    finally:
        for proc in (other, ours):
            proc.kill()
            proc.wait()


def test_hub_log_tail_shows_only_this_run_with_its_reason_first(tmp_path: Path):
    log = tmp_path / "jupyterhub.log"
    log.write_text("[C 2026-01-01 JupyterHub app:1] Bad config: an old mistake\n")
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write("[I 2026-01-02 JupyterHub app:2] starting\n")
        f.write("Traceback (most recent call last):\n  ...\n")
        f.write("ValueError: profiles: a slug is used twice\n")
    tail = _log_tail(log, offset)
    assert tail.startswith("Reason: ValueError: profiles: a slug is used twice\n")
    assert "an old mistake" not in tail


class NoCredentialsError(Exception):
    """Stands in for botocore's error: a store back end's own exception, not a StoreError."""

    def __str__(self) -> str:
        return "Unable to locate credentials"


def _no_credentials(*_args: object, **_kwargs: object) -> None:
    raise NoCredentialsError


@pytest.mark.parametrize("where", ["open_store", "missing_datasets"])
def test_data_hint_turns_any_store_exception_into_one_line(
    where: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(f"scalelab.commands.up.{where}", _no_credentials)
    if where == "missing_datasets":
        monkeypatch.setattr("scalelab.commands.up.open_store", lambda url: object())
    hint = data_hint("s3://nobucket/course")
    assert hint is not None and "\n" not in hint
    assert hint.startswith("The course store s3://nobucket/course cannot be read: ")
    assert "NoCredentialsError: Unable to locate credentials" in hint
    assert "credentials" in hint.split("Check", 1)[1]


def test_data_fetch_turns_any_store_exception_into_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setattr("scalelab.store.open_store", _no_credentials)
    assert main(["data", "fetch", "millionsong", "--store", "s3://nobucket/course"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("scalelab: error: the course store s3://nobucket/course cannot be read")
    assert "NoCredentialsError" in err and "Traceback" not in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("relative/store", "{cwd}/relative/store"),
        ("./store/../course", "{cwd}/course"),
        ("/srv/course", "/srv/course"),
        ("file:///srv/course", "file:///srv/course"),
        ("s3://bucket/course", "s3://bucket/course"),
        ("hdfs://nn:8020/course", "hdfs://nn:8020/course"),
    ],
)
def test_up_writes_a_relative_store_path_as_an_absolute_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, expected: str
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("scalelab.commands.up.find_proxy", lambda: ["/usr/bin/chp"])
    settings = up_settings(tmp_path / "state", ip="127.0.0.1", port=8000, store_url=given)
    want = expected.format(cwd=tmp_path)
    assert settings.store_url == want
    assert embedded_config(settings, "s3cret-pass").ScaleLabSpawner.store_url == want
    assert json.dumps(want) in config_file_text(settings, operator_config=None)


def test_absolute_store_url_expands_the_home_and_takes_the_folder_given():
    assert absolute_store_url("~/store") == str(Path.home() / "store")
    assert absolute_store_url("store", Path("/srv/hub")) == "/srv/hub/store"
