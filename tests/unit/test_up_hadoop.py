"""``scalelab up --hadoop``'s pure parts: fixed ports in ``ports.json``, the hub service's entry,
the spawner's settings, and the generated hub config (no cluster started here: that is
``tests/integration/hadoop/test_up_hadoop.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from traitlets.config import Config

from scalelab.commands.errors import UpError
from scalelab.commands.up_config import UpSettings, config_file_text, embedded_config
from scalelab.commands.up_hadoop import (
    SERVICE_NAME,
    HadoopPorts,
    HadoopService,
    add_service,
    choose_ports,
    load_ports,
    service_entry,
)

PORTS = HadoopPorts(21001, 21002, 21003, 21004, 21005, 21006, 21007)


def _service(user: str | None = "scalelab-hadoop") -> HadoopService:
    return HadoopService(folder="/srv/state/hadoop", ports=PORTS, user=user, superuser_group="root")


def _settings(store_url: str, **changed) -> UpSettings:
    return UpSettings(
        state_dir="/srv/state",
        store_url=store_url,
        proxy_command=["chp"],
        hub_port=1,
        proxy_api_port=2,
        **changed,
    )


def test_free_ports_are_chosen_once_then_read_back(tmp_path: Path):
    path = tmp_path / "hadoop" / "ports.json"
    first = choose_ports(path)
    values = list(json.loads(path.read_text()).values())
    assert len(set(values)) == 7 and all(20000 <= p <= 65535 for p in values)
    assert choose_ports(path) == first  # the same ports at the next start
    assert oct(path.stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize(
    "text, words",
    [
        ("{not json", "cannot read"),
        (json.dumps({"namenode_rpc": 1}), "must name seven different ports"),
        (json.dumps({**PORTS.__dict__, "web": 21001}), "must name seven different ports"),
        (json.dumps({**PORTS.__dict__, "web": 70000}), "must name seven different ports"),
        (json.dumps({**PORTS.__dict__, "web": "8088"}), "must name seven different ports"),
    ],
)
def test_a_bad_ports_file_is_refused_naming_it_and_the_fix(tmp_path: Path, text: str, words):
    path = tmp_path / "ports.json"
    path.write_text(text)
    with pytest.raises(UpError) as raised:
        load_ports(path)
    assert words in str(raised.value)
    assert str(path) in str(raised.value) and "delete it for new ports" in str(raised.value)


def test_the_service_runs_the_jvm_with_the_fixed_ports_and_kept_data():
    entry = service_entry(_service())
    assert (entry["name"], entry["user"], entry["cwd"]) == (
        SERVICE_NAME,
        "scalelab-hadoop",
        "/srv/state/hadoop/data",
    )
    argv = entry["command"]
    assert argv[1:4] == ["-m", "scalelab.hub_ext.services.service_guard", "--"]
    assert argv[argv.index("--namenode-ports") + 1] == "21001,21002"
    assert argv[argv.index("--yarn-ports") + 1] == "21003,21004,21005,21006,21007"
    assert argv[argv.index("--superuser-group") + 1] == "root"
    assert argv[argv.index("--base-dir") + 1] == "/srv/state/hadoop/data/base"
    assert "--keep-data" in argv and "--until-signal" in argv
    assert "umask 022" in argv[argv.index("-c") + 1]
    assert "url" not in entry  # no proxy route to the cluster's web pages
    assert "user" not in service_entry(_service(user=None))  # not root: the hub's own user


def test_the_service_is_added_beside_the_operators_services():
    c = Config()
    c.JupyterHub.services = [{"name": "grader", "api_token": "x"}]
    add_service(c, _service())
    add_service(c, _service())  # twice: still one
    assert [s["name"] for s in c.JupyterHub.services] == ["grader", SERVICE_NAME]


def test_the_hub_config_puts_the_store_on_hdfs_and_spark_on_yarn():
    settings = _settings("hdfs://127.0.0.1:21001/course", hadoop=_service().to_dict())
    c = embedded_config(UpSettings.from_json(settings.to_json()), "password1")
    spawner = c.ScaleLabSpawner
    assert spawner.store_url == "hdfs://127.0.0.1:21001/course"
    assert spawner.store_identity_class.endswith("HDFSUserIdentity")
    assert (spawner.spark_master, spawner.hadoop_conf_dir) == ("yarn", "/srv/state/hadoop/conf")
    assert spawner.spark_conf["spark.executor.instances"] == "2"
    text = config_file_text(settings, "/srv/ops.py")
    # The service is added after the operator's file, which may set the list of services.
    assert text.index("load_subconfig") < text.index("add_service(c,") < text.index("configure(c)")


def test_without_hadoop_nothing_of_it_is_configured():
    settings = _settings("file:///srv/state/store")
    c = embedded_config(settings, "password1")
    assert c.ScaleLabSpawner.spark_master != "yarn"
    assert "hadoop_conf_dir" not in c.ScaleLabSpawner
    assert "add_service" not in config_file_text(settings, None)


def test_the_doctor_for_hadoop_needs_a_state_folder_it_ran_on(tmp_path: Path):
    from scalelab.commands.doctor import doctor_checks

    with pytest.raises(UpError) as raised:
        doctor_checks(tmp_path, hadoop=True, quick=True)
    assert "`scalelab up --hadoop` has not run on" in str(raised.value)
    assert str(tmp_path / "hadoop" / "ports.json") in str(raised.value)
