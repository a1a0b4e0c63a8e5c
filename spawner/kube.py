"""Kubernetes: the GPUs granted by ScaleLab's allocator as KubeSpawner settings (pure builders).

ScaleLab's ledger, limits and queue are the same on Kubernetes; only the last step differs: how
a pod receives the GPUs its server was granted. Two ways, both as KubeSpawner trait values:

- ``"count"`` (default): ask the NVIDIA device plugin for as many ``nvidia.com/gpu`` as were
  granted (``extra_resource_limits``); the plugin picks the devices on the node the pod lands
  on, and ScaleLab's ledger counts them.
- ``"exact"``: run the pod on the node that has the granted devices, with the NVIDIA container
  runtime and ``NVIDIA_VISIBLE_DEVICES`` set to their UUIDs, and no device-plugin request; for
  clusters where ScaleLab owns the GPUs of its nodes.

A spawner class for Kubernetes, as a sketch (it needs ``jupyterhub-kubespawner`` and a cluster,
neither of which is here to test it on)::

    from kubespawner import KubeSpawner
    from scalelab.spawner.course import CourseSpawnerMixin
    from scalelab.spawner.kube import kube_gpu_settings

    class ScaleLabKubeSpawner(CourseSpawnerMixin, KubeSpawner):
        async def _start(self):  # KubeSpawner's own start, once the GPUs are granted
            for trait, value in kube_gpu_settings(self.gpu_uuids).items():
                setattr(self, trait, value)
            return await super()._start()

Source of the conventions: NVIDIA k8s-device-plugin (resource ``nvidia.com/gpu``) and the
NVIDIA container toolkit (``NVIDIA_VISIBLE_DEVICES`` takes device UUIDs; ``void`` exposes none).
"""

from __future__ import annotations

from collections.abc import Sequence
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
