"""Kernelspecs against the kernelspec format (jupyter_client docs, "Kernel specs"), and the Livy
(sparkmagic) settings: config generation and ops' session settings kept under %%configure."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from traitlets import TraitError
from traitlets.config import Config, Configurable

from scalelab.kernels.livy import (
    LivySettings,
    effective_session,
    livy_environment,
    prepare_server,
    settings_from_environment,
    sparkmagic_config,
    sparkmagic_kernelspecs,
    write_sparkmagic_config,
)
from scalelab.kernels.specs import FLAVOURS, kernelspec

# The documented kernel.json fields: argv (with {connection_file}), display_name, language
# required; interrupt_mode "signal" or "message"; env a dict of strings; metadata an object.
KERNELSPEC_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["argv", "display_name", "language"],
    "additionalProperties": False,
    "properties": {
        "argv": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "contains": {"type": "string", "pattern": r"\{connection_file\}"},
        },
        "display_name": {"type": "string", "minLength": 1},
        "language": {"type": "string", "minLength": 1},
        "interrupt_mode": {"enum": ["signal", "message"]},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "metadata": {"type": "object"},
        "kernel_protocol_version": {"type": "string"},
    },
}


def _all_specs() -> dict[str, dict]:
    return {**{f: kernelspec(f) for f in FLAVOURS}, **sparkmagic_kernelspecs()}


@pytest.mark.parametrize("name", list(_all_specs()))
def test_kernelspecs_follow_the_kernelspec_format(name: str):
    spec = _all_specs()[name]
    jsonschema.validate(spec, KERNELSPEC_SCHEMA)
    loaded = KernelSpec(resource_dir="/nowhere", **spec)  # jupyter_client's own traits
    assert loaded.to_dict()["argv"] == spec["argv"]
    assert loaded.interrupt_mode == "signal"


def test_the_schema_rejects_what_jupyter_would_not_start():
    broken = dict(kernelspec("pyspark"), argv=["python", "-m", "ipykernel_launcher"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, KERNELSPEC_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(dict(kernelspec("pytorch"), env={"X": 1}), KERNELSPEC_SCHEMA)


def _ops_settings() -> LivySettings:
    c = Config()
    c.LivySettings.url = "http://livy.cluster:8998"
    c.LivySettings.auth = "Kerberos"
    c.LivySettings.session_configs = {
        "queue": "course",
        "driverMemory": "2g",
        "conf": {"spark.executor.memoryOverhead": "1g", "spark.dynamicAllocation.enabled": "false"},
    }
    return LivySettings(config=c)


def test_sparkmagic_config_points_both_kernels_at_livy():
    conf = sparkmagic_config(_ops_settings())
    for key in ("kernel_python_credentials", "kernel_scala_credentials"):
        assert conf[key] == {"url": "http://livy.cluster:8998", "auth": "Kerberos"}
    assert conf["session_configs_defaults"]["queue"] == "course"
    assert conf["session_configs"] == conf["session_configs_defaults"]
    assert conf["livy_server_heartbeat_timeout_seconds"] == 900  # sparkmagic's key for it
    assert "heartbeatTimeoutInSecond" not in conf["session_configs_defaults"]  # it overrides


def test_configure_keeps_ops_settings():
    defaults = sparkmagic_config(_ops_settings())["session_configs_defaults"]
    student = {"executorMemory": "4g", "conf": {"spark.sql.shuffle.partitions": "64"}}
    session = effective_session(defaults, student)
    assert session["queue"] == "course" and session["driverMemory"] == "2g"
    assert session["executorMemory"] == "4g"
    assert session["conf"] == {
        "spark.executor.memoryOverhead": "1g",
        "spark.dynamicAllocation.enabled": "false",
        "spark.sql.shuffle.partitions": "64",
    }
    changed = effective_session(defaults, {"conf": {"spark.executor.memoryOverhead": "2g"}})
    assert changed["conf"]["spark.executor.memoryOverhead"] == "2g"
    assert defaults["conf"]["spark.executor.memoryOverhead"] == "1g"  # ops' copy untouched


def test_misspelt_session_setting_is_an_error_naming_it():
    c = Config()
    c.LivySettings.session_configs = {"driverMemroy": "2g"}
    with pytest.raises(TraitError, match=r"unknown key\(s\) \['driverMemroy'\]"):
        LivySettings(config=c)
    c = Config()
    c.LivySettings.url = "livy.cluster:8998"
    with pytest.raises(TraitError, match="http:// or https://"):
        LivySettings(config=c)


def test_no_livy_url_no_config():
    with pytest.raises(ValueError, match=r"c\.LivySettings\.url"):
        sparkmagic_config(LivySettings())


def test_config_file_written_for_sparkmagic(tmp_path: Path):
    path = write_sparkmagic_config(_ops_settings(), tmp_path / "sparkmagic")
    assert path == tmp_path / "sparkmagic" / "config.json"
    assert json.loads(path.read_text()) == sparkmagic_config(_ops_settings())
    assert [p.name for p in path.parent.iterdir()] == ["config.json"]


def test_hub_settings_travel_to_the_server_and_are_written_there(tmp_path: Path):
    hub_side = Configurable(config=_ops_settings().config)  # e.g. the spawner, as parent
    env = livy_environment(LivySettings(parent=hub_side))
    assert set(env) == {"SCALELAB_LIVY"}
    server_side = settings_from_environment(env)
    assert sparkmagic_config(server_side) == sparkmagic_config(_ops_settings())
    conf_dir, kernels_dir = prepare_server(server_side, tmp_path / ".scalelab")
    assert json.loads((conf_dir / "config.json").read_text())["kernel_python_credentials"] == {
        "url": "http://livy.cluster:8998",
        "auth": "Kerberos",
    }
    ksm = KernelSpecManager(kernel_dirs=[str(kernels_dir)], ensure_native_kernel=False)
    assert set(ksm.find_kernel_specs()) == {"sparkmagic-pyspark", "sparkmagic-spark"}
    assert ksm.get_kernel_spec("sparkmagic-pyspark").display_name == "PySpark (remote, Livy)"


def test_no_livy_url_adds_nothing_to_the_server():
    assert livy_environment(LivySettings()) == {}
    assert settings_from_environment({}) is None


def test_ops_heartbeat_goes_to_sparkmagics_own_setting():
    # sparkmagic 0.23 writes livy_server_heartbeat_timeout_seconds over the session's own
    settings = LivySettings(
        url="http://livy.cluster:8998",
        session_configs={"heartbeatTimeoutInSecond": 0, "queue": "course"},
    )
    conf = sparkmagic_config(settings)
    assert conf["livy_server_heartbeat_timeout_seconds"] == 0
    assert conf["session_configs_defaults"] == {"queue": "course"}
    student = {"heartbeatTimeoutInSecond": 60, "kind": "pyspark"}
    assert effective_session(conf["session_configs_defaults"], student, heartbeat_s=0) == {
        "queue": "course",
        "kind": "pyspark",
    }
