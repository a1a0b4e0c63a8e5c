"""Each student's server gets its own store identity, never the hub's credential (unit tests).

The spawner's ``store_identity_class`` makes the storage options of each server: the hub's
(``SharedStoreIdentity``), the student's own S3 key (``S3KeyFile``), or the student as the HDFS
user (``HDFSUserIdentity``). The store's own refusals with such keys are
``tests/integration/s3/test_store_s3_isolation.py``'s, and the namenode's with the student as the
HDFS user
``tests/integration/hadoop/test_store_hdfs_cluster.py``'s (the HDFS test cluster).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from fsspec.implementations.arrow import HadoopFileSystem
from fsspec.implementations.webhdfs import WebHDFS
from jupyterhub.objects import Hub
from jupyterhub.spawner import SpawnException
from traitlets.config import Config

import scalelab
from scalelab.common.config_registry import CONFIG_CLASSES
from scalelab.hub_ext.hub.config_check import ConfigProblem
from scalelab.spawner import ScaleLabSpawner, validate_spawner_config
from scalelab.spawner.store_identity import (
    HDFSUserIdentity,
    S3KeyFile,
    SharedStoreIdentity,
    StoreIdentity,
    parse_key_file,
    seaweedfs_actions,
    student_s3_policy,
    without_credentials,
)

HUB_KEY = "HUB-ACCESS-KEY-0123"
HUB_SECRET = "hub-secret-never-in-a-server-0123456789"
HUB_TOKEN = "hub-session-token-0123456789"
#: The hub's S3 options: its credential everywhere s3fs and botocore take one.
HUB_OPTIONS = {
    "key": HUB_KEY,
    "secret": HUB_SECRET,
    "token": HUB_TOKEN,
    "endpoint_url": "http://127.0.0.1:8333",
    "client_kwargs": {
        "region_name": "eu-west-1",
        "aws_access_key_id": HUB_KEY,
        "aws_secret_access_key": HUB_SECRET,
    },
    "config_kwargs": {"connect_timeout": 2},
}
KEYS = {
    "alice": {"key": "ALICE-KEY-0123", "secret": "alice-secret-0123456789"},
    "bob": {"key": "BOB-KEY-0123", "secret": "bob-secret-0123456789", "token": "bob-token-0123"},
}
S3_KEY_FILE = "scalelab.spawner.store_identity.S3KeyFile"
HDFS_USER = "scalelab.spawner.store_identity.HDFSUserIdentity"


def _key_file(tmp_path: Path, entries: dict = KEYS, mode: int = 0o600) -> Path:
    path = tmp_path / "store-keys.json"
    path.write_text(json.dumps(entries))
    path.chmod(mode)
    return path


def _spawner(
    tmp_path: Path,
    name: str = "alice",
    *,
    store_url: str = "s3://course",
    options: dict | None = None,
    identity: str | None = S3_KEY_FILE,
    key_file: Path | None = None,
    **section,
) -> ScaleLabSpawner:
    """A ScaleLabSpawner for ``name``, as the hub makes it (see tests/unit/test_spawner.py)."""
    c = Config()
    c.ScaleLabSpawner.home_root = str(tmp_path / "homes")
    c.ScaleLabSpawner.store_url = store_url
    c.ScaleLabSpawner.store_options = HUB_OPTIONS if options is None else options
    if identity:
        c.ScaleLabSpawner.store_identity_class = identity
    if key_file is not None:
        c.S3KeyFile.key_file = str(key_file)
    for key, value in section.items():
        setattr(c.ScaleLabSpawner, key, value)
    return ScaleLabSpawner(
        config=c, hub=Hub(), user=SimpleNamespace(name=name, url=f"/user/{name}/")
    )


def _server_options(env: dict[str, str]) -> dict:
    return json.loads(env["SCALELAB_STORE_OPTIONS"])


# -- the default: the hub's options, as before ---------------------------------------------------


def test_the_default_identity_hands_on_the_hub_options_as_before(tmp_path: Path):
    spawner = _spawner(tmp_path, identity=None)
    assert spawner.store_identity_class is SharedStoreIdentity
    assert isinstance(spawner.store_identity, SharedStoreIdentity)
    assert spawner.store_identity.parent is spawner
    assert not spawner.store_identity.enforced
    assert _server_options(spawner.get_env()) == HUB_OPTIONS


def test_shared_identity_copies_the_options():
    options = {"endpoint_url": "http://s3"}
    made = SharedStoreIdentity().server_store_options("alice", "s3://course", options)
    assert made == options and made is not options


# -- S3KeyFile: each student's own key -----------------------------------------------------------


def test_alice_gets_her_own_key_and_the_hubs_settings_but_no_hub_credential(tmp_path: Path):
    identity = S3KeyFile(key_file=str(_key_file(tmp_path)))
    made = identity.server_store_options("alice", "s3://course", HUB_OPTIONS)
    assert made == {
        "key": "ALICE-KEY-0123",
        "secret": "alice-secret-0123456789",
        "endpoint_url": "http://127.0.0.1:8333",
        "client_kwargs": {"region_name": "eu-west-1"},
        "config_kwargs": {"connect_timeout": 2},
    }
    bobs = identity.server_store_options("bob", "s3://course", HUB_OPTIONS)
    assert (bobs["key"], bobs["token"]) == ("BOB-KEY-0123", "bob-token-0123")
    assert HUB_OPTIONS["key"] == HUB_KEY  # the hub's own options are not changed


def test_every_credential_key_is_dropped():
    options = {
        **{k: "x" * 20 for k in ("key", "secret", "token", "username", "password")},
        **{k: "x" * 20 for k in ("aws_access_key_id", "aws_secret_access_key")},
        "aws_session_token": "t" * 20,
        "profile": "ops",
        "anon": True,
        "client_kwargs": {"aws_session_token": "t" * 20, "profile_name": "ops"},
        "endpoint_url": "http://s3",
    }
    assert without_credentials(options) == {"endpoint_url": "http://s3"}


def test_the_hub_key_is_never_in_the_environment_of_alices_server(tmp_path: Path):
    env = _spawner(tmp_path, key_file=_key_file(tmp_path)).get_env()
    for value in env.values():
        for secret in (HUB_KEY, HUB_SECRET, HUB_TOKEN):
            assert secret not in value
        assert "bob-secret" not in value
    options = _server_options(env)
    assert (options["key"], options["secret"]) == ("ALICE-KEY-0123", "alice-secret-0123456789")
    assert env["SCALELAB_STORE_URL"] == "s3://course"


def test_a_hub_secret_put_into_the_server_environment_stops_the_spawn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    spawner = _spawner(
        tmp_path,
        key_file=_key_file(tmp_path),
        environment={"AWS_SECRET_ACCESS_KEY": HUB_SECRET},
    )
    with caplog.at_level(logging.ERROR), pytest.raises(SpawnException) as info:
        spawner.get_env()
    assert "store configuration is unsafe" in info.value.message
    assert HUB_SECRET not in info.value.message
    assert "AWS_SECRET_ACCESS_KEY" in info.value.log_message
    assert "AWS_SECRET_ACCESS_KEY" in caplog.text and HUB_SECRET not in caplog.text


def test_the_hubs_own_aws_variables_kept_for_servers_stop_the_spawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hub-env-secret-0123456789")
    spawner = _spawner(
        tmp_path,
        options={"endpoint_url": "http://s3"},
        key_file=_key_file(tmp_path),
        env_keep=["PATH", "AWS_SECRET_ACCESS_KEY"],
    )
    with pytest.raises(SpawnException) as info:
        spawner.get_env()
    assert "AWS_SECRET_ACCESS_KEY" in info.value.log_message
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert "AWS_SECRET_ACCESS_KEY" not in spawner.get_env()


def test_a_student_missing_from_the_file_cannot_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    path = _key_file(tmp_path)
    spawner = _spawner(tmp_path, "carol", key_file=path)
    with caplog.at_level(logging.ERROR), pytest.raises(SpawnException) as info:
        spawner.get_env()
    assert info.value.message == (
        "Your server cannot start: no store credential for carol; ask the course's operators."
    )
    assert str(path) not in info.value.message  # the file is the operators' business
    assert info.value.reason == "store-credential"
    assert f"no store credential for carol in {path} (c.S3KeyFile.key_file)" in caplog.text


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_a_key_file_open_to_group_or_others_is_refused(tmp_path: Path, mode: int):
    path = _key_file(tmp_path, mode=mode)
    with pytest.raises(SpawnException) as info:
        _spawner(tmp_path, key_file=path).get_env()
    assert f"chmod 600 {path}" in info.value.log_message
    assert f"(mode {mode:04o})" in info.value.log_message
    assert "ask the course's operators" in info.value.message
    assert "alice-secret" not in info.value.log_message


def test_a_changed_key_file_is_read_again_without_a_restart(tmp_path: Path):
    path = _key_file(tmp_path, {"alice": KEYS["alice"]})
    identity = S3KeyFile(key_file=str(path))
    with pytest.raises(SpawnException):
        identity.server_store_options("bob", "s3://course", HUB_OPTIONS)
    assert identity.credentials() is identity.credentials()  # unchanged: not read again
    path.write_text(json.dumps(KEYS))  # ops add bob; same mode, new size and mtime
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))
    assert identity.server_store_options("bob", "s3://course", HUB_OPTIONS)["key"] == (
        "BOB-KEY-0123"
    )
    path.write_text(json.dumps({"bob": KEYS["bob"]}))  # and take alice out
    os.utime(path, ns=(stamp + 10**9, stamp + 10**9))
    with pytest.raises(SpawnException, match="no store credential for alice"):
        identity.server_store_options("alice", "s3://course", HUB_OPTIONS)


def test_a_missing_key_file_is_named(tmp_path: Path):
    spawner = _spawner(tmp_path, key_file=tmp_path / "nowhere.json")
    with pytest.raises(SpawnException) as info:
        spawner.get_env()
    assert f"c.S3KeyFile.key_file {tmp_path / 'nowhere.json'} does not exist" in (
        info.value.log_message
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('["alice"]', "must hold a JSON object"),
        ('{"alice": "AKIA"}', "the entry of 'alice' must be"),
        ('{"alice": {"key": "k", "secret": "s", "region": "x"}}', "unknown key(s) ['region']"),
        ('{"alice": {"key": "k"}}', "the entry of 'alice' has no secret: add it"),
        ('{"alice": {"key": "k", "secret": 5}}', "must have strings"),
    ],
)
def test_a_malformed_key_file_is_one_line_naming_the_file(text: str, message: str):
    with pytest.raises(ValueError) as info:
        parse_key_file(text, "/srv/keys.json")
    assert message in str(info.value)
    assert "c.S3KeyFile.key_file /srv/keys.json" in str(info.value)
    assert "\n" not in str(info.value)


def test_the_s3_policy_limits_a_key_to_its_home_and_the_data_sets():
    policy = student_s3_policy("s3://bucket/course", "alice")
    own, datasets, listing = policy["Statement"]
    assert own["Resource"] == "arn:aws:s3:::bucket/course/home/alice/*"
    assert {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"} <= set(own["Action"])
    assert (datasets["Action"], datasets["Resource"]) == (
        "s3:GetObject",
        "arn:aws:s3:::bucket/course/datasets/*",
    )
    assert listing["Resource"] == "arn:aws:s3:::bucket"
    assert listing["Condition"]["StringLike"]["s3:prefix"] == [
        "course/home/alice/*",
        "course/datasets/*",
    ]
    assert seaweedfs_actions("s3://course", "alice") == [
        "Read:course/home/alice/*",
        "Write:course/home/alice/*",
        "List:course/home/alice/*",
        "Read:course/datasets/*",
        "List:course/datasets/*",
    ]


# -- HDFSUserIdentity: the student as the HDFS user (a namenode: test_store_hdfs_cluster.py) ------


def test_hdfs_unit_no_namenode_webhdfs_simple_claims_the_student(tmp_path: Path):
    identity = HDFSUserIdentity()
    hub = {"user": "hdfs", "port": 9870, "password": "p"}
    made = identity.server_store_options("alice", "webhdfs://nn:9870/course", hub)
    assert made == {"user": "alice", "port": 9870}
    assert identity.server_environment("alice", "webhdfs://nn:9870/course") == {}
    # fsspec's WebHDFS takes it as the user.name of every request (nothing is contacted yet)
    fs = WebHDFS("nn", skip_instance_cache=True, **made)
    assert fs.pars == {"user.name": "alice"}


def test_hdfs_unit_no_namenode_hdfs_simple_sets_the_user_for_both_clients(tmp_path: Path):
    spawner = _spawner(
        tmp_path,
        store_url="hdfs://nn:8020/course",
        options={"user": "hdfs", "dfs.client.failover.max.attempts": "3"},
        identity=HDFS_USER,
    )
    env = spawner.get_env()
    assert _server_options(env) == {"user": "alice", "dfs.client.failover.max.attempts": "3"}
    assert env["HADOOP_USER_NAME"] == "alice"  # hdfs-native and Hadoop's Java client read it
    assert "HADOOP_PROXY_USER" not in env
    assert "user" in inspect.signature(HadoopFileSystem.__init__).parameters  # pyarrow's


def test_hdfs_unit_no_namenode_proxy_mode_impersonates_the_student():
    identity = HDFSUserIdentity(mode="proxy")
    hub = {"user": "scalelab", "kerb_kwargs": {"mutual_authentication": 2}}
    made = identity.server_store_options("alice", "webhdfs://nn:9870/course", hub)
    assert made == {"kerberos": True, "proxy_to": "alice", "kerb_kwargs": hub["kerb_kwargs"]}
    assert {"proxy_to", "kerberos"} <= set(inspect.signature(WebHDFS.__init__).parameters)
    on_hdfs = identity.server_store_options("alice", "hdfs://nn:8020/c", {"kerb_ticket": "/t"})
    assert on_hdfs == {"kerb_ticket": "/t"}
    assert identity.server_environment("alice", "hdfs://nn:8020/c") == {
        "HADOOP_PROXY_USER": "alice"
    }


def test_hdfs_unit_no_namenode_other_stores_are_refused(tmp_path: Path):
    spawner = _spawner(tmp_path, store_url="s3://course", identity=HDFS_USER)
    with pytest.raises(SpawnException) as info:
        spawner.get_env()
    assert "HDFSUserIdentity is for hdfs:// and webhdfs:// stores, not 's3://course'" in (
        info.value.log_message
    )


# -- configuration checks at hub start -----------------------------------------------------------


def test_the_identity_classes_are_registered_hub_sections():
    hub = {e.name for e in CONFIG_CLASSES if e.config_file == "hub"}
    assert {"S3KeyFile", "HDFSUserIdentity"} <= hub
    assert issubclass(S3KeyFile, StoreIdentity) and issubclass(HDFSUserIdentity, StoreIdentity)


def test_a_misspelt_key_file_setting_is_refused_at_start():
    c = Config()
    c.S3KeyFile.keyfile = "/srv/keys.json"
    with pytest.raises(ConfigProblem) as info:
        scalelab.configure(c)
    assert str(info.value) == (
        "the configuration is not valid: c.S3KeyFile has unknown setting(s) ['keyfile'] "
        "(did you mean 'keyfile' -> 'key_file'?)"
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"store_url": "file:///srv/course", "store_identity_class": S3_KEY_FILE},
            "c.ScaleLabSpawner.store_identity_class = S3KeyFile is for s3:// and s3a:// stores,"
            " not 'file:///srv/course'",
        ),
        (
            {"store_url": "s3://course", "store_identity_class": S3_KEY_FILE},
            "c.S3KeyFile.key_file is not set",
        ),
        (
            {"store_url": "s3://course", "store_identity_class": "os.path"},
            "c.ScaleLabSpawner.store_identity_class = 'os.path' is not a "
            "scalelab.spawner.store_identity.StoreIdentity",
        ),
        (
            {"store_url": "s3://course", "store_identity_class": HDFS_USER},
            "c.ScaleLabSpawner.store_identity_class = HDFSUserIdentity is for hdfs:// and "
            "webhdfs:// stores",
        ),
    ],
)
def test_an_identity_that_cannot_work_is_refused_at_start(settings: dict, message: str):
    c = Config()
    for key, value in settings.items():
        setattr(c.ScaleLabSpawner, key, value)
    with pytest.raises(ValueError) as info:
        validate_spawner_config(c)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_working_identity_passes_the_start_check(tmp_path: Path):
    c = Config()
    c.ScaleLabSpawner.store_url = "s3://course"
    c.ScaleLabSpawner.store_identity_class = S3_KEY_FILE
    c.S3KeyFile.key_file = str(tmp_path / "created-later.json")  # read at each spawn, not here
    validate_spawner_config(c)
    c = Config()
    c.ScaleLabSpawner.store_url = "webhdfs://nn:9870/course"
    c.ScaleLabSpawner.store_identity_class = HDFS_USER
    c.HDFSUserIdentity.mode = "proxy"
    validate_spawner_config(c)
