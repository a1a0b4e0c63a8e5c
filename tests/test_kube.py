"""The Kubernetes mapping of granted GPUs (pure builders; no cluster here)."""

from __future__ import annotations

import pytest

from scalelab.spawner.kube import kube_gpu_settings, resource_limits


def test_count_mode_asks_the_device_plugin_for_as_many_gpus_as_granted():
    settings = kube_gpu_settings(["GPU-a", "GPU-b"])
    assert settings["extra_resource_limits"] == {"nvidia.com/gpu": "2"}
    assert settings["extra_resource_guarantees"] == {"nvidia.com/gpu": "2"}
    assert settings["environment"] == {"SCALELAB_GPUS": "GPU-a,GPU-b"}
    assert "node_selector" not in settings


def test_exact_mode_pins_the_devices_by_uuid_on_their_node():
    settings = kube_gpu_settings(["MIG-1"], mode="exact", node="gpu-node-3")
    assert settings["extra_resource_limits"] == {}
    assert settings["environment"]["NVIDIA_VISIBLE_DEVICES"] == "MIG-1"
    assert settings["node_selector"] == {"kubernetes.io/hostname": "gpu-node-3"}
    assert settings["extra_pod_config"] == {"runtimeClassName": "nvidia"}


@pytest.mark.parametrize("mode", ["count", "exact"])
def test_cpu_only_pods_see_no_gpu(mode):
    settings = kube_gpu_settings([], mode=mode)
    assert settings["extra_resource_limits"] == {}
    assert settings["environment"] == {"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": ""}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: kube_gpu_settings(["GPU-a"], mode="exact"), "needs the node"),
        (lambda: kube_gpu_settings(["GPU-a"], mode="all"), "unknown GPU mode 'all'"),
        (lambda: resource_limits(-1), "cannot ask Kubernetes for -1 GPUs"),
    ],
)
def test_bad_requests_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_other_resource_names_for_other_device_plugins():
    assert resource_limits(1, "amd.com/gpu") == {"amd.com/gpu": "1"}
    assert resource_limits(0) == {}
