"""Who servers run as: the parts that need no running hub, kernel or cluster. The rest runs for real
in ``tests/integration/hub/test_identity.py``.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from jupyterhub.spawner import SpawnException
from traitlets.config import Config

from scalelab.commands.errors import UpError
from scalelab.commands.identity import blocked_for_others, choose_identity, is_loopback
from scalelab.commands.state_files import StateFolder
from scalelab.commands.state_modes import check_operator_config, protect_state
from scalelab.commands.up_config import UpSettings, embedded_config
from scalelab.spawner import ScaleLabSpawner
from scalelab.spawner.local import local_store_root, root_servers_problem
from scalelab.spawner.system_users import system_user_name
from scalelab.spawner.validation import validate_spawner_config


def test_root_gets_a_system_user_per_student():
    chosen = choose_identity(euid=0, user="root", ip="0.0.0.0", shared_identity=False, blocked=None)
    assert chosen.system_users is True
    assert "system user of their own" in chosen.banner


@pytest.mark.parametrize(
    ("euid", "shared", "blocked", "why"),
    [
        (1000, False, None, "not run by root"),
        (0, True, None, "--shared-identity"),
        (1000, True, None, "--shared-identity"),
    ],
)
def test_otherwise_a_single_user_trial_says_so_in_one_line(euid, shared, blocked, why):
    chosen = choose_identity(
        euid=euid, user="ops", ip="127.0.0.1", shared_identity=shared, blocked=blocked
    )
    assert chosen.system_users is False
    assert chosen.banner.startswith("Single-user trial: every login runs as ops")
    assert why in chosen.banner and "\n" not in chosen.banner


def test_root_never_runs_every_login_as_root_without_the_operators_word():
    blocked = "/root (mode 0700)"
    with pytest.raises(UpError) as caught:
        choose_identity(euid=0, user="root", ip="127.0.0.1", shared_identity=False, blocked=blocked)
    assert str(caught.value) == (
        "Every login would run as root (students' system users could not run ScaleLab: /root "
        "(mode 0700)): move ScaleLab and its state folder where other users can enter them, or "
        "run every server as root on purpose with --shared-identity."
    )
    said = choose_identity(euid=0, user="root", ip="127.0.0.1", shared_identity=True, blocked=None)
    assert said.system_users is False and "(--shared-identity)" in said.banner


@pytest.mark.parametrize(("euid", "fix"), [(1000, "run scalelab up as root"), (0, "move")])
def test_a_shared_identity_beyond_loopback_needs_the_operators_word(euid, fix):
    blocked = "/root (mode 0700)" if euid == 0 else None
    with pytest.raises(UpError, match=r"--ip 0\.0\.0\.0 would serve other machines") as caught:
        choose_identity(euid=euid, user="ops", ip="0.0.0.0", shared_identity=False, blocked=blocked)
    assert fix in str(caught.value) and "--shared-identity" in str(caught.value)
    said = choose_identity(euid=euid, user="ops", ip="0.0.0.0", shared_identity=True, blocked=None)
    assert said.system_users is False


@pytest.mark.parametrize(
    ("ip", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("10.1.2.3", False), ("", False), ("hub.example.org", False)],
)  # fmt: skip
def test_loopback(ip: str, loopback: bool):
    assert is_loopback(ip) is loopback


def test_a_folder_others_cannot_enter_is_named(tmp_path: Path):
    closed = tmp_path / "closed"
    (closed / "inside").mkdir(parents=True)
    tmp_path.chmod(0o755)
    closed.chmod(0o700)
    assert blocked_for_others([closed / "inside"]) == f"{closed} (mode 0700)"
    assert blocked_for_others([closed / "inside" / "not-yet"]) == f"{closed} (mode 0700)"
    closed.chmod(0o711)
    (closed / "inside").chmod(0o711)
    assert blocked_for_others([closed / "inside"]) == f"{closed / 'inside'} (mode 0711)"
    (closed / "inside").chmod(0o755)
    found = blocked_for_others([closed / "inside", closed / "inside" / "not-yet"])
    assert found is None or not found.startswith(str(tmp_path))  # pytest's own 0700 folders


def test_system_user_names_follow_tljh_and_useradds_rules():
    assert system_user_name("jupyter-", "alice") == "jupyter-alice"
    for bad in ("a" * 30, "Alice", "al ice", "-x"):
        with pytest.raises(SpawnException, match="not a valid name"):
            system_user_name("jupyter-" if bad != "-x" else "", bad)


@pytest.mark.parametrize(
    ("url", "root"),
    [("file:///srv/course", "/srv/course"), ("/srv/course", "/srv/course"),
     ("s3://bucket/course", None), ("hdfs://nn:8020/course", None)],
)  # fmt: skip
def test_local_store_root(url: str, root: str | None):
    assert local_store_root(url) == (None if root is None else Path(root))


def test_state_secrets_are_the_hubs_alone_and_what_students_need_is_open(tmp_path: Path):
    state = StateFolder(tmp_path / "state")
    for folder in (state.root, state.homes, state.logs, state.kernelspecs / "kernels" / "k"):
        folder.mkdir(parents=True, exist_ok=True)
    for secret in (state.database, state.cookie_secret, state.config_file, state.lock):
        secret.write_text("s")
        secret.chmod(0o644)
    (state.kernelspecs / "kernels" / "k" / "kernel.json").write_text("{}")
    store = state.store
    (store / "datasets" / "d").mkdir(parents=True)
    (store / "datasets" / "d" / "part.csv").write_text("x")

    protect_state(state, system_users=False, store=store)
    assert stat.S_IMODE(state.root.stat().st_mode) == 0o700
    for secret in (state.database, state.cookie_secret, state.config_file, state.lock):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600

    protect_state(state, system_users=True, store=store)
    modes = {
        p.relative_to(state.root).as_posix() or ".": stat.S_IMODE(p.stat().st_mode)
        for p in [state.root, state.homes, state.logs, store, store / "home", store / "datasets",
                  store / "datasets" / "d" / "part.csv", state.database,
                  state.kernelspecs / "kernels" / "k" / "kernel.json"]
    }  # fmt: skip
    assert modes == {
        ".": 0o711, "homes": 0o755, "logs": 0o700, "store": 0o755, "store/home": 0o755,
        "store/datasets": 0o755, "store/datasets/d/part.csv": 0o644,
        "jupyterhub.sqlite": 0o600, "share/jupyter/kernels/k/kernel.json": 0o644,
    }  # fmt: skip


def test_an_operator_config_others_can_read_is_refused(tmp_path: Path):
    config = tmp_path / "hub.py"
    config.write_text("c.Authenticator.admin_users = {'ops'}\n")
    config.chmod(0o644)
    problem = check_operator_config(config)
    assert problem is not None and f"chmod 600 {config}" in problem and "0644" in problem
    config.chmod(0o600)
    assert check_operator_config(config) is None


def _spawner(tmp_path: Path, system_users: bool) -> ScaleLabSpawner:
    c = Config()
    c.ScaleLabSpawner.home_root = str(tmp_path / "homes")
    c.ScaleLabSpawner.store_url = (tmp_path / "store").as_uri()
    c.ScaleLabSpawner.system_users = system_users
    c.ScaleLabSpawner.server_log_dir = str(tmp_path / "logs")
    return ScaleLabSpawner(config=c, user=SimpleNamespace(name="alice", url="/user/alice/"))


def test_scalelab_up_sets_system_users_from_its_settings(tmp_path: Path):
    base = dict(state_dir=str(tmp_path), store_url="file:///s", proxy_command=["chp"])
    for wanted in (True, False):
        settings = UpSettings(**base, hub_port=1, proxy_api_port=2, system_users=wanted)
        config = embedded_config(settings, "password1").ScaleLabSpawner
        assert config.system_users is wanted
        # without system users the servers run as the hub's user, said with --shared-identity
        assert config.allow_root_servers is (not wanted)
        assert UpSettings.from_json(settings.to_json()) == settings


def test_a_hub_run_by_root_never_runs_every_server_as_root_by_accident():
    where = "c.ScaleLabSpawner"
    fixes = (
        "c.ScaleLabSpawner: every student's server would run as root (the hub runs as root, "
        "home_root is set and system_users is off): set c.ScaleLabSpawner.system_users = True "
        "for a system user per student, or c.ScaleLabSpawner.allow_root_servers = True to run "
        "them as root on purpose."
    )
    recipe = dict(hub_is_root=True, home_root="/srv/homes", system_users=False, where=where)
    assert root_servers_problem(**recipe, allowed=False) == fixes
    assert root_servers_problem(**recipe, allowed=True) == ""
    assert root_servers_problem(**{**recipe, "system_users": True}, allowed=False) == ""
    assert root_servers_problem(**{**recipe, "hub_is_root": False}, allowed=False) == ""
    assert root_servers_problem(**{**recipe, "home_root": ""}, allowed=False) == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is a root hub's")
def test_the_plain_hub_recipe_run_by_root_refuses_before_it_starts(tmp_path: Path):
    c = Config()
    c.ScaleLabSpawner.home_root = str(tmp_path / "homes")
    c.ScaleLabSpawner.store_url = (tmp_path / "store").as_uri()
    with pytest.raises(ValueError, match="would run as root") as caught:
        validate_spawner_config(c)
    assert "allow_root_servers = True" in str(caught.value)
    c.ScaleLabSpawner.allow_root_servers = True
    validate_spawner_config(c)  # said on purpose


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is a root hub's")
@pytest.mark.asyncio
async def test_a_login_whose_system_user_is_root_gets_no_server(tmp_path: Path):
    c = Config()
    c.ScaleLabSpawner.store_url = (tmp_path / "store").as_uri()  # home_root empty: own accounts
    spawner = ScaleLabSpawner(config=c, user=SimpleNamespace(name="root", url="/user/root/"))
    with pytest.raises(SpawnException, match="root's server would run as root") as caught:
        await spawner.start()
    assert "system_users = True" in str(caught.value)
    assert spawner.runtime_dir == ""  # refused before anything was made


def test_with_system_users_the_server_is_never_root_nor_shares_the_hubs_log_folder(
    tmp_path: Path,
):
    spawner = _spawner(tmp_path, system_users=True)
    assert spawner.system_user == "jupyter-alice"
    assert spawner.home_dir == str((tmp_path / "homes" / "alice").resolve())
    assert "--allow-root" not in spawner.get_args()
    shared = _spawner(tmp_path, system_users=False)
    assert shared.system_user == "alice"
    if os.geteuid() == 0:
        assert "--allow-root" in shared.get_args()


@pytest.mark.skipif(os.geteuid() != 0, reason="the root rule of scalelab up: needs root (CI)")
def test_doctor_run_by_root_fails_an_operator_config_others_can_read(tmp_path: Path):
    from scalelab.commands.doctor import FAIL, OK, check_configuration

    config = tmp_path / "hub.py"
    config.write_text("c.Authenticator.admin_users = {'ops'}\n")
    config.chmod(0o644)
    # A state folder students' users can reach (its parent others may enter), as /var/lib is.
    parent = Path(tempfile.mkdtemp(prefix="scalelab-doctor-"))
    try:
        parent.chmod(0o755)
        check = check_configuration(parent / "state", config_file=str(config))
        assert check.status == FAIL and "(mode 0644)" in check.detail, check
        assert check.fix.startswith(f"chmod 600 {config}")
        config.chmod(0o600)
        assert check_configuration(parent / "state", config_file=str(config)).status == OK
        # Under a folder others cannot enter, scalelab up runs a single-user trial: no rule.
        config.chmod(0o644)
        tmp_path.chmod(0o700)
        assert check_configuration(tmp_path / "state", config_file=str(config)).status == OK
    finally:
        shutil.rmtree(parent)
