"""The Kubernetes mapping of granted GPUs and a server's NetworkPolicy (pure builders; no cluster
here: tests/integration/kube validates the manifests against Kubernetes' schema)."""

from __future__ import annotations

import pytest

from scalelab.spawner.kube import (
    PRIVATE_RANGES,
    kube_gpu_settings,
    node_of,
    resource_limits,
    server_network_policy,
    split_secret_env,
)


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


NODES = {"n1": ["GPU-a", "GPU-b"], "n2": ["GPU-c"]}


def test_exact_gpus_are_placed_on_their_one_node():
    assert node_of(["GPU-b", "GPU-a"], NODES) == "n1"
    assert node_of([], NODES) is None
    with pytest.raises(ValueError, match=r"on 2 nodes \(n1, n2\) and a pod runs on one"):
        node_of(["GPU-a", "GPU-c"], NODES)
    with pytest.raises(ValueError, match=r"GPU-z are on no node of ScaleLabKubeSpawner\.gpu_nodes"):
        node_of(["GPU-z"], NODES)


def test_credentials_leave_the_environment_for_a_secret():
    env = {"A": "1", "TOKEN": "t0k3n", "SCALELAB_STORE_OPTIONS": '{"key": "k"}'}
    plain, data = split_secret_env(env, ["TOKEN", "SCALELAB_STORE_OPTIONS", "ABSENT"], "s1")
    assert data == {"TOKEN": "t0k3n", "SCALELAB_STORE_OPTIONS": '{"key": "k"}'}
    assert plain["A"] == "1"
    assert plain["TOKEN"] == {
        "name": "TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "s1", "key": "TOKEN"}},
    }
    assert list(plain) == list(env)  # the order is kept
    assert "t0k3n" not in repr(plain)


POD = {"hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": ""}


def test_a_servers_network_policy_lets_in_the_proxy_and_hub_on_its_port_only():
    hub = {"component": "hub"}
    policy = server_network_policy(
        "jupyter-alice-scalelab", POD, 8888, hub_labels=hub, hub_port=8081
    )
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": POD}
    assert spec["policyTypes"] == ["Ingress", "Egress"]  # both closed but for the rules below
    (ingress,) = spec["ingress"]
    assert ingress["ports"] == [{"port": 8888, "protocol": "TCP"}]
    peers = ingress["from"]
    assert peers == [
        {"podSelector": {"matchLabels": {"hub.jupyter.org/network-access-singleuser": "true"}}}
    ]
    to_hub, dns, public = spec["egress"]
    assert to_hub["to"] == [{"podSelector": {"matchLabels": {"component": "hub"}}}]
    assert to_hub["ports"] == [{"port": 8081, "protocol": "TCP"}]
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    block = public["to"][0]["ipBlock"]
    assert block["cidr"] == "0.0.0.0/0" and block["except"] == list(PRIVATE_RANGES)
    assert "169.254.169.254/32" in block["except"]  # the cloud metadata server


def test_public_egress_off_and_the_operators_own_rules():
    hdfs = {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 8020}]}
    policy = server_network_policy(
        "p", POD, 8888, hub_labels={"component": "hub"}, hub_port=8081, public_egress=False,
        egress=[hdfs],
    )  # fmt: skip
    rules = policy["spec"]["egress"]
    assert len(rules) == 3 and rules[-1] == hdfs  # hub, DNS, HDFS: no public addresses
    assert not any("ipBlock" in peer for rule in rules[:2] for peer in rule.get("to", []))
    with pytest.raises(ValueError, match="'to' and 'ports'"):
        server_network_policy("p", POD, 8888, hub_labels={}, hub_port=8081, egress=[{"from": []}])
    for bad in (0, 65536):
        with pytest.raises(ValueError, match="not a TCP port"):
            server_network_policy("p", POD, bad, hub_labels={}, hub_port=8081)
