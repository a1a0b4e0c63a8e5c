"""Kubernetes: the GPUs granted by ScaleLab's allocator as KubeSpawner settings (pure builders).

Two modes: ``"count"`` asks the NVIDIA device plugin for as many ``nvidia.com/gpu``; ``"exact"``
pins the granted UUIDs on their node (:func:`node_of`) through ``NVIDIA_VISIBLE_DEVICES``.
:func:`split_secret_env` splits a server's environment into plain variables and a Secret;
:func:`server_network_policy` closes a server's pod to all but the proxy and the hub.
Why: docs/design-notes.md, scalelab.spawner.kube.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: The device plugin's extended resource.
GPU_RESOURCE = "nvidia.com/gpu"


def resource_limits(count: int, resource: str = GPU_RESOURCE) -> dict[str, str]:
    """``extra_resource_limits`` / ``extra_resource_guarantees`` for ``count`` GPUs.

    Raises
    ------
    ValueError
        ``count`` is negative.
    """
    if count < 0:
        raise ValueError(f"cannot ask Kubernetes for {count} GPUs")
    return {resource: str(count)} if count else {}


def kube_gpu_settings(
    gpu_uuids: Sequence[str],
    *,
    mode: str = "count",
    node: str | None = None,
    runtime_class: str = "nvidia",
    resource: str = GPU_RESOURCE,
) -> dict[str, Any]:
    """KubeSpawner trait values that hand a pod exactly the granted GPUs.

    Parameters
    ----------
    gpu_uuids
        The GPUs granted to the server (empty: CPU only).
    mode
        ``"count"`` (device plugin) or ``"exact"`` (these devices on ``node``).
    node
        For ``"exact"`` with GPUs: the node that has them (its ``kubernetes.io/hostname``).
    runtime_class
        For ``"exact"``: the RuntimeClass of the NVIDIA container runtime.
    resource
        The device plugin's resource name.

    Returns
    -------
    dict
        KubeSpawner trait name -> value: ``extra_resource_limits``,
        ``extra_resource_guarantees`` and ``environment`` always; ``node_selector`` and
        ``extra_pod_config`` in ``"exact"`` mode with GPUs.

    Raises
    ------
    ValueError
        An unknown mode, or ``"exact"`` with GPUs but no node.
    """
    if mode not in ("count", "exact"):
        raise ValueError(f"unknown GPU mode {mode!r}: 'count' or 'exact'")
    uuids = ",".join(gpu_uuids)
    if not gpu_uuids:
        # CPU only: no device request, and the container runtime exposes no GPU at all.
        return {
            "extra_resource_limits": {},
            "extra_resource_guarantees": {},
            "environment": {"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": ""},
        }
    if mode == "count":
        limits = resource_limits(len(gpu_uuids), resource)
        return {
            "extra_resource_limits": limits,
            "extra_resource_guarantees": dict(limits),
            "environment": {"SCALELAB_GPUS": uuids},
        }
    if not node:
        raise ValueError("exact GPU selection needs the node that has the granted GPUs")
    return {
        "extra_resource_limits": {},
        "extra_resource_guarantees": {},
        "environment": {"NVIDIA_VISIBLE_DEVICES": uuids, "SCALELAB_GPUS": uuids},
        "node_selector": {"kubernetes.io/hostname": node},
        "extra_pod_config": {"runtimeClassName": runtime_class},
    }


def node_of(gpu_uuids: Sequence[str], gpu_nodes: Mapping[str, Sequence[str]]) -> str | None:
    """The node that holds all of ``gpu_uuids`` (exact mode), or None for no GPUs.

    Parameters
    ----------
    gpu_uuids
        The GPUs granted to one server.
    gpu_nodes
        ``ScaleLabKubeSpawner.gpu_nodes``: node name (``kubernetes.io/hostname``) -> the UUIDs
        of its GPUs.

    Raises
    ------
    ValueError
        A GPU on no node of ``gpu_nodes``, or GPUs on more than one node (a pod runs on one).
    """
    if not gpu_uuids:
        return None
    where = {uuid: node for node, uuids in gpu_nodes.items() for uuid in uuids}
    unknown = [u for u in gpu_uuids if u not in where]
    if unknown:
        raise ValueError(
            f"GPU(s) {', '.join(unknown)} are on no node of ScaleLabKubeSpawner.gpu_nodes: "
            "list every GPU of the inventory under its node"
        )
    nodes = sorted({where[u] for u in gpu_uuids})
    if len(nodes) > 1:
        raise ValueError(
            f"the granted GPUs {', '.join(gpu_uuids)} are on {len(nodes)} nodes "
            f"({', '.join(nodes)}) and a pod runs on one: with gpu_mode 'exact', offer "
            "multi-GPU profiles only on a cluster whose GPUs are on one node, or use 'count'"
        )
    return nodes[0]


def split_secret_env(
    env: Mapping[str, str], secret_keys: Iterable[str], secret_name: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """A server's environment split into what the pod spec may show and what goes in a Secret.

    Parameters
    ----------
    env
        The server's environment (``get_env()``): name -> value.
    secret_keys
        The names whose values are credentials (those missing from ``env`` are skipped).
    secret_name
        The Secret the pod reads them from.

    Returns
    -------
    tuple
        (KubeSpawner environment: the plain values, and for each secret name a
        ``{"name", "valueFrom": {"secretKeyRef": {"name", "key"}}}`` entry; the Secret's
        ``stringData``: secret name -> value).
    """
    keys = set(secret_keys)
    plain: dict[str, Any] = {}
    data: dict[str, str] = {}
    for name, value in env.items():
        if name in keys:
            data[name] = value
            plain[name] = {
                "name": name,
                "valueFrom": {"secretKeyRef": {"name": secret_name, "key": name}},
            }
        else:
            plain[name] = value
    return plain, data


#: The label of the pods that may reach single-user servers: Zero to JupyterHub gives it to the
#: proxy and the hub (``hub.jupyter.org/network-access-singleuser: "true"``).
SERVER_ACCESS_LABEL = "hub.jupyter.org/network-access-singleuser"
#: Destinations kept from a server's public egress, as Zero to JupyterHub's singleuser policy
#: keeps them (``egressAllowRules.nonPrivateIPs``): the private ranges of RFC 1918, where other
#: students' pods and the cluster's services are, and the cloud metadata server.
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.169.254/32")
#: DNS, over UDP and TCP.
DNS_PORTS = ({"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"})


def server_network_policy(
    name: str,
    pod_labels: Mapping[str, str],
    port: int,
    *,
    hub_labels: Mapping[str, str],
    hub_port: int,
    public_egress: bool = True,
    egress: Sequence[Mapping[str, Any]] = (),
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One server's NetworkPolicy (``networking.k8s.io/v1``, as JSON), after Zero to
    JupyterHub's singleuser policy: in, only pods labelled :data:`SERVER_ACCESS_LABEL` (the
    proxy, the hub) on the server's ``port``; out, the hub's API, DNS, public addresses (not
    :data:`PRIVATE_RANGES`, so no other student's pod) when ``public_egress``, and ``egress``,
    the operators' own rules (the store's and Spark's addresses).

    Parameters
    ----------
    name
        The policy's name.
    pod_labels
        Labels that select this server's pod alone (user and server name).
    port
        The server's TCP port.
    hub_labels, hub_port
        The hub pod's labels and its API's TCP port.
    public_egress
        Whether the server may reach addresses outside :data:`PRIVATE_RANGES` (PyPI, data
        sets on the Internet).
    egress
        Further ``NetworkPolicyEgressRule`` objects, appended as given.
    labels
        The policy's own labels.

    Raises
    ------
    ValueError
        A port outside 1-65535, or an egress rule with keys other than ``to`` and ``ports``.
    """
    for p in (port, hub_port):
        if not 0 < p < 65536:
            raise ValueError(f"{p} is not a TCP port")
    for rule in egress:
        unknown = sorted(set(rule) - {"to", "ports"})
        if unknown:
            raise ValueError(
                f"an egress rule has {unknown}: a NetworkPolicyEgressRule has 'to' and 'ports'"
            )
    rules: list[dict[str, Any]] = [
        {
            "to": [{"podSelector": {"matchLabels": dict(hub_labels)}}],
            "ports": [{"port": hub_port, "protocol": "TCP"}],
        },
        {"ports": [dict(p) for p in DNS_PORTS]},
    ]
    if public_egress:
        rules.append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(PRIVATE_RANGES)}}]})
    rules += [dict(rule) for rule in egress]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "podSelector": {"matchLabels": dict(pod_labels)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": {SERVER_ACCESS_LABEL: "true"}}}],
                    "ports": [{"port": port, "protocol": "TCP"}],
                }
            ],
            "egress": rules,
        },
    }
