"""Bad configuration and bad names, refused up front with one clear message (issue 6, Must 3, 5):
the parts that need no running hub, kernel or cluster. The rest runs for real in
``tests/integration/hub/test_config_faults.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from jupyterhub.authenticators.shared import SharedPasswordAuthenticator
from jupyterhub.spawner import SpawnException

from scalelab.commands.doctor import FAIL, OK, check_configuration
from scalelab.commands.up_config import UpSettings, embedded_config
from scalelab.common.ports import free_port
from scalelab.hub_ext.hub.config_check import ConfigProblem, check_hub_config
from scalelab.spawner.homes import make_home
from scalelab.store import StoreConfigError
from scalelab.store.access.fs import store_options_from_env

MISSPELT = "c.GPUPolicy.max_gpu_per_server = 2\n"


BAD_VALUE = 'c.GPUPolicy.group_limits = {"ml": {"max_gpu": 2}}\n'


SYNTAX_ERROR = "c.JupyterHub.port = int(\n"


def _base(tmp_path: Path):
    settings = UpSettings(str(tmp_path / "state"), (tmp_path / "store").as_uri(), [], 0, 0)
    return embedded_config(settings, password="a-test-password")


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _scalelab(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scalelab", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (MISSPELT, "c.GPUPolicy has unknown setting(s) ['max_gpu_per_server']"),
        (BAD_VALUE, "GPUPolicy.group_limits['ml']: unknown key(s) ['max_gpu']"),
        ("c.ScaleLabCulling.idle_timout = 5\n", "c.ScaleLabCulling"),
        ("c.ScaleLabSpawner.profiles = [{'slug': 'x', 'gpu': 1}]\n", "gpu"),
        (
            "c.ScaleLabSpawner.store_ulr = 'file:///srv'\n",
            "c.ScaleLabSpawner has unknown setting(s) ['store_ulr'] (did you mean "
            "'store_ulr' -> 'store_url'?)",
        ),
        ("c.LivySettings.urll = 'http://livy:8998'\n", "c.LivySettings has unknown setting(s)"),
        (
            "c.LivySettings.session_configs = {'driverMem': '1g'}\n",
            "c.LivySettings.session_configs has unknown key(s) ['driverMem']",
        ),
        ("c.HandIn.deadline = {}\n", "c.HandIn has unknown setting(s) ['deadline']"),
        (
            "c.HandIn.deadlines = {'lab1': '2027-01-15 23:59'}\n",
            "c.HandIn.deadlines['lab1'] = '2027-01-15 23:59' has no UTC offset",
        ),
    ],
)
def test_the_hubs_own_validation_runs_up_front_and_names_the_setting(tmp_path, text, message):
    config = _file(tmp_path, "mine.py", text)
    base = _base(tmp_path)
    with pytest.raises(ConfigProblem) as caught:
        check_hub_config(base, str(config))
    assert str(caught.value).startswith("the configuration is not valid: ")
    assert message in str(caught.value)
    assert str(config) in caught.value.fix
    assert "services" not in base.JupyterHub and "GPUPolicy" not in base  # base untouched


def test_syntax_and_runtime_errors_name_the_file_and_line(tmp_path: Path):
    base = _base(tmp_path)
    syntax = _file(tmp_path, "nc_syn.py", SYNTAX_ERROR)
    with pytest.raises(ConfigProblem) as caught:
        check_hub_config(base, str(syntax))
    assert str(caught.value) == (
        "cannot read the configuration: '(' was never closed (nc_syn.py, line 1)"
    )
    assert caught.value.fix == f"Correct the Python syntax at line 1 of {syntax}."
    runtime = _file(tmp_path, "nc_run.py", "c.JupyterHub.port = 8000\nx = undefined_name\n")
    with pytest.raises(ConfigProblem, match=r"NameError: .*undefined_name.* \(nc_run.py, line 2\)"):
        check_hub_config(base, str(runtime))
    good = _file(tmp_path, "good.py", "c.GPUPolicy.max_gpus_per_server = 2\n")
    merged = check_hub_config(base, str(good))
    assert merged.GPUPolicy.max_gpus_per_server == 2
    assert merged.JupyterHub.port == 8000  # ScaleLab's defaults are kept under the file's


@pytest.mark.parametrize("text", [MISSPELT, BAD_VALUE])
def test_doctor_fails_the_configuration_check_as_up_would(tmp_path: Path, text: str):
    config = _file(tmp_path, "mine.py", text)
    check = check_configuration(tmp_path / "state", config_file=str(config))
    assert check.status == FAIL
    assert check.detail.startswith("the configuration is not valid: ")
    assert "GPUPolicy" in check.detail and "scalelab config-reference" in check.fix
    good = check_configuration(tmp_path / "state", config_file=None)
    assert good.status == OK and good.detail == "ScaleLab's defaults: loaded and valid"


def test_doctor_reports_a_syntax_error_as_a_failed_check_and_runs_the_others(tmp_path: Path):
    config = _file(tmp_path, "nc_syn.py", SYNTAX_ERROR)
    store = tmp_path / "store"
    store.mkdir()
    args = ["--state-dir", str(tmp_path / "state"), "--port", str(free_port())]
    result = _scalelab(
        "doctor", "--quick", *args, "--store", store.as_uri(), "--config", str(config)
    )
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert (
        "[FAIL] Configuration: cannot read the configuration: '(' was never closed "
        "(nc_syn.py, line 1)\n"
        f"       fix: Correct the Python syntax at line 1 of {config}." in out
    )
    assert "[ ok ] Java: " in out and "] Course store: " in out  # the rest still checked
    assert out.rstrip().endswith("1 check(s) failed: Configuration")
    assert "Traceback" not in out + result.stderr


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            SYNTAX_ERROR,
            "scalelab: error: cannot read the configuration: '(' was never closed "
            "(nc_syn.py, line 1). Correct the Python syntax at line 1 of {config}.",
        ),
        (
            BAD_VALUE,
            "scalelab: error: the configuration is not valid: GPUPolicy.group_limits['ml']: "
            "unknown key(s) ['max_gpu']; allowed: ['max_gpus_per_application', "
            "'max_gpus_per_server', 'max_gpus_per_user']. "
            "Correct that setting in {config}; `scalelab config-reference` lists every setting "
            "with its type.",
        ),
    ],
)
def test_up_refuses_a_bad_config_file_in_one_line_before_the_hub_starts(tmp_path, text, line):
    config = _file(tmp_path, "nc_syn.py", text)
    state = tmp_path / "state"
    result = _scalelab(
        "up", "--state-dir", str(state), "--port", str(free_port()), "--config", str(config),
        "--shared-identity",  # pytest's 0700 folder: as root, no system user could enter it
        env={"SCALELAB_PASSWORD": "a-test-password"},
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == line.format(config=config) + "\n"
    assert result.stdout == ""  # not "Starting ScaleLab's hub": no hub ran
    assert not (state / "logs" / "jupyterhub.log").exists()
    assert not (state / "jupyterhub_config.py").exists()


def test_scalelab_ups_username_pattern_allows_only_names_that_are_home_folders(tmp_path: Path):
    auth = SharedPasswordAuthenticator(config=_base(tmp_path))  # JupyterHub's own check
    for good in ("alice", "student001", "a.b-c_d", "7up", "a" * 64):
        assert auth.validate_username(auth.normalize_username(good)), good
    for bad in ("a" * 65, "a" * 300, "-x", ".hidden", "_x", "a b", "a/b", "ünï", "a@b.org", ""):
        assert not auth.validate_username(auth.normalize_username(bad)), bad
    assert auth.validate_username(auth.normalize_username("Alice"))  # lowercased first


def test_a_home_that_cannot_be_made_is_a_spawn_failure_naming_folder_and_reason(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    cases = [
        (tmp_path / "file", "alice", "Not a directory"),
        (tmp_path / "homes", "x" * 300, "File name too long"),
        (tmp_path / "homes", "..", "the user name '..' is not a folder name"),
    ]
    for root, name, reason in cases:
        with pytest.raises(SpawnException) as caught:
            make_home(root, name)
        message = caught.value.log_message
        assert f"its home folder {root.resolve() / name} cannot be created ({reason})" in message
        assert caught.value.status_code == 503
    assert not (tmp_path / "file").is_dir() and (tmp_path / "file").read_text() == "not a folder"
    assert make_home(tmp_path / "homes", "alice") == (tmp_path / "homes" / "alice").resolve()
    assert (tmp_path / "homes" / "alice").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(("value", "what"), [("{oops", "is not valid JSON"), ("[1]", "not list")])
def test_bad_store_options_name_the_environment_variable(value: str, what: str):
    with pytest.raises(StoreConfigError) as caught:
        store_options_from_env({"SCALELAB_STORE_OPTIONS": value})
    message = str(caught.value)
    assert what in message
    assert "set SCALELAB_STORE_OPTIONS to a JSON object" in message
    assert "c.ScaleLabSpawner" not in message  # the value came from the variable, not the hub


def test_data_fetch_with_bad_store_options_names_the_variable(tmp_path: Path):
    store = tmp_path / "store"
    result = _scalelab(
        "data", "fetch", "millionsong", "--store", store.as_uri(), "--no-download",
        env={"SCALELAB_STORE_OPTIONS": "{oops"},
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.startswith("scalelab: error: SCALELAB_STORE_OPTIONS is not valid JSON")
    assert "export SCALELAB_STORE_OPTIONS=" in result.stderr
    assert "c.ScaleLabSpawner" not in result.stderr and "Traceback" not in result.stderr
    assert not store.exists()  # nothing was written
