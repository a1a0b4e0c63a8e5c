"""Kernelspecs (pure builders) and kernel start-up settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

from scalelab.kernels import KERNEL_NAMES, install_kernelspecs, kernelspec
from scalelab.kernels.spark_defaults import spark_conf
from scalelab.kernels.specmanager import CourseKernelSpecManager
from scalelab.kernels.startup import gpu_banner, session_warning


def test_three_kernels_in_launcher_order():
    assert KERNEL_NAMES == ("scalelab-pyspark", "scalelab-tensorflow", "scalelab-pytorch")
    names = [kernelspec(f)["display_name"] for f in ("pyspark", "tensorflow", "pytorch")]
    assert names == ["PySpark", "TensorFlow", "PyTorch"]


def test_spec_runs_ipykernel_with_scalelab_startup():
    spec = kernelspec("pyspark")
    assert spec["argv"][:5] == ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    assert "_scalelab.start('pyspark', globals())" in spec["argv"][5]
    assert spec["language"] == "python"


def test_tensorflow_kernel_grows_gpu_memory():
    assert kernelspec("tensorflow")["env"]["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"


def test_unknown_flavour_is_a_key_error():
    with pytest.raises(KeyError):
        kernelspec("julia")


def test_installed_specs_are_found_by_jupyter(tmp_path: Path):
    written = install_kernelspecs(tmp_path)
    assert len(written) == 3
    ksm = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")], ensure_native_kernel=False)
    specs = ksm.get_all_specs()
    assert set(specs) == set(KERNEL_NAMES)
    assert json.loads(written[0].read_text()) == kernelspec("pyspark")


def test_spark_conf_binds_local_mode_to_loopback():
    conf = spark_conf("local[*]", "2g", "scalelab-alice")
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.driver.memory"] == "2g"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert "spark.driver.bindAddress" not in spark_conf("spark://m:7077", "2g", "x")


def test_gpu_banner():
    assert gpu_banner({"SCALELAB_GPUS": ""}) == "CPU only"
    assert gpu_banner({"SCALELAB_GPUS": "GPU-a,GPU-b"}) == "GPUs: GPU-a, GPU-b"


def test_gpu_session_warning_only_in_the_window_with_the_stop_time():
    deadline = 1_800_000_000.0
    env = {"SCALELAB_GPU_DEADLINE": f"{deadline:.0f}", "SCALELAB_GPU_WARNING_S": "900"}
    assert session_warning(env, deadline - 901) is None
    message = session_warning(env, deadline - 600)
    assert message is not None
    assert "in about 10 min" in message and "Your files are kept" in message
    assert session_warning({}, deadline) is None
    assert session_warning({"SCALELAB_GPU_DEADLINE": "soon"}, deadline) is None


def test_only_allowed_kernelspecs_can_be_started(tmp_path: Path):
    install_kernelspecs(tmp_path)
    ksm = CourseKernelSpecManager(
        kernel_dirs=[str(tmp_path / "kernels")], allowed_kernelspecs={"scalelab-pytorch"}
    )
    assert ksm.get_kernel_spec("scalelab-pytorch").display_name == "PyTorch"
    with pytest.raises(NoSuchKernel):
        ksm.get_kernel_spec("scalelab-pyspark")  # installed, but not allowed
