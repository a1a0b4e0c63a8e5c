"""ScaleLab on Kubernetes: :class:`ScaleLabKubeSpawner`, the course layer over KubeSpawner.

GPUs granted before the pod exists (or a place in ScaleLab's queue), group-restricted profiles,
credentials in a Secret of the server's own, a NetworkPolicy of its own, the course environment
and per-profile pod settings (``profile_overrides``). Needs ``scalelab[kube]``; KubeSpawner's
own settings are ``c.ScaleLabKubeSpawner.<setting>``. Why: docs/design-notes.md,
scalelab.spawner.kube_spawner.
"""

from __future__ import annotations

import asyncio
import copy
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from jupyterhub.spawner import SpawnException
from jupyterhub.utils import exponential_backoff, recursive_update
from kubernetes_asyncio.client import V1ObjectMeta, V1Secret
from kubernetes_asyncio.client.exceptions import ApiException
from kubespawner import KubeSpawner
from kubespawner.clients import shared_client
from traitlets import Bool, Dict, Enum, List, TraitError, Unicode, default, validate

from scalelab import envvars
from scalelab.spawner.course import CourseSpawnerMixin
from scalelab.spawner.kube import (
    GPU_RESOURCE,
    kube_gpu_settings,
    node_of,
    server_network_policy,
    split_secret_env,
)

#: Server environment variables that are credentials, besides the store identity's own.
CREDENTIAL_VARIABLES = (envvars.STORE_OPTIONS, "JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN")


class ScaleLabKubeSpawner(CourseSpawnerMixin, KubeSpawner):
    """KubeSpawner with ScaleLab's course layer (see the module docstring)."""

    gpu_mode = Enum(
        ["count", "exact"],
        default_value="count",
        config=True,
        help="""How a pod gets the GPUs ScaleLab granted. `count`: as many `gpu_resource` as
        granted in its limits and requests (the NVIDIA device plugin picks the devices on the
        node the pod lands on; ScaleLab's ledger counts them). `exact`: the granted devices by
        UUID (`NVIDIA_VISIBLE_DEVICES`) on their node (`gpu_nodes`) with the RuntimeClass
        `gpu_runtime_class`, no device-plugin request: for nodes whose GPUs ScaleLab alone
        hands out.""",
    )
    gpu_resource = Unicode(
        GPU_RESOURCE,
        config=True,
        help="The device plugin's extended resource (`count` mode), e.g. `amd.com/gpu`.",
    )
    gpu_runtime_class = Unicode(
        "nvidia",
        config=True,
        help="The RuntimeClass of the NVIDIA container runtime (`exact` mode).",
    )
    gpu_nodes = Dict(
        key_trait=Unicode(),
        value_trait=List(Unicode()),
        config=True,
        help="""`exact` mode: node name (its `kubernetes.io/hostname`) -> the UUIDs of its GPUs,
        every GPU of the inventory under its node: {"gpu-node-1": ["GPU-...", "GPU-..."]}.
        The GPUs granted to one server must be on one node.""",
    )
    profile_overrides = Dict(
        value_trait=Dict(),
        config=True,
        help="""KubeSpawner settings per ScaleLab profile slug, applied when a server of that
        profile starts (as KubeSpawner's `kubespawner_override`): {"gpu-1": {"image":
        "registry/course-cuda:2026", "mem_limit": "32G"}}. Keys are KubeSpawner settings; an
        unknown one is an error. Use ScaleLab's `profiles` rather than KubeSpawner's
        `profile_list`.""",
    )

    network_policy = Bool(
        True,
        config=True,
        help="""A NetworkPolicy per server (`<pod name>-scalelab`, made before its pod and
        deleted with it), after Zero to JupyterHub's singleuser policy: in, only the pods
        labelled `hub.jupyter.org/network-access-singleuser: "true"` (give it to the proxy and
        the hub; Zero to JupyterHub does) on the server's port; out, the hub's API, DNS,
        public addresses (`network_policy_public_egress`) and `network_policy_egress`. No
        student's pod reaches another's kernels, Spark driver or server. Needs a network
        plugin that enforces NetworkPolicies (Calico, Cilium). Off: no policy (a namespace
        policy of the operators' own instead).""",
    )
    network_policy_hub_labels = Dict(
        default_value={"component": "hub"},
        key_trait=Unicode(),
        value_trait=Unicode(),
        config=True,
        help="""Labels of the hub's pod, which servers may reach on the hub API's port (the port
        of the hub's `hub_connect_url`, else 8081). Zero to JupyterHub's hub pod has
        `component: hub`.""",
    )
    network_policy_public_egress = Bool(
        True,
        config=True,
        help="""Whether servers may reach public addresses (all but 10.0.0.0/8, 172.16.0.0/12,
        192.168.0.0/16 and the cloud metadata server 169.254.169.254): PyPI, data sets on the
        Internet. The course's store and Spark cluster on private addresses need their own
        rules in `network_policy_egress`.""",
    )
    network_policy_egress = List(
        Dict(),
        config=True,
        help="""Further egress rules of every server's NetworkPolicy (Kubernetes'
        NetworkPolicyEgressRule: `to` and `ports`), e.g. the course's HDFS and Spark:
        [{"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 8020}]}].""",
    )

    #: KubeSpawner's NetworkingV1Api client (made when first needed).
    networking_api: Any = None
    #: KubeSpawner settings as they were before this start's ``profile_overrides``.
    _before_overrides: dict[str, Any] | None = None

    @default("cmd")
    def _default_cmd(self) -> list[str]:
        # KubeSpawner's default (None: the image's command) drops the server arguments, and
        # with them ScaleLab's kernel allow-list.
        return ["jupyterhub-singleuser"]

    @validate("profile_overrides")
    def _check_overrides(self, proposal: Any) -> dict:
        for slug, overrides in proposal.value.items():
            unknown = sorted(k for k in overrides if not self.has_trait(k))
            if unknown:
                raise TraitError(
                    f"ScaleLabKubeSpawner.profile_overrides[{slug!r}]: {unknown} are not "
                    "KubeSpawner settings"
                )
        return proposal.value

    # -- what the pod gets -----------------------------------------------------------------------

    @property
    def store_secret_name(self) -> str:
        """The name of this server's Secret: ``<pod name>-scalelab``."""
        return f"{self.pod_name}-scalelab"

    def gpu_settings(self) -> dict[str, Any]:
        """The granted GPUs as pod settings (:func:`~scalelab.spawner.kube.kube_gpu_settings`).

        Raises
        ------
        jupyterhub.spawner.SpawnException
            ``exact`` mode and the granted GPUs are on no node, or on several.
        """
        node = None
        if self.gpu_mode == "exact":
            try:
                node = node_of(self.gpu_uuids, self.gpu_nodes)
            except ValueError as exc:
                raise SpawnException(
                    "Your server cannot start: its GPUs cannot be placed; ask the course's "
                    "operators (the hub's log says why).",
                    log_message=f"{self.server_key}: {exc}",
                ) from None
        return kube_gpu_settings(
            self.gpu_uuids,
            mode=self.gpu_mode,
            node=node,
            runtime_class=self.gpu_runtime_class,
            resource=self.gpu_resource,
        )

    def secret_keys(self) -> list[str]:
        """The server environment variables that go in its Secret: the hub token, the store's
        options and the store identity's variables."""
        identity_env = self.store_identity.server_environment(self.user.name, self.store_url)
        return [*CREDENTIAL_VARIABLES, *identity_env]

    def _environment(self) -> dict[str, str]:
        """The course environment with this pod's GPU variables (see :meth:`get_env`)."""
        env = super().get_env()
        if self.gpu_mode == "count" and self.gpu_uuids:
            # The device plugin picks the devices: the ledger's UUIDs are not the pod's.
            env.pop("CUDA_VISIBLE_DEVICES", None)
            env.pop("NVIDIA_VISIBLE_DEVICES", None)
        env.update(self.gpu_settings()["environment"])
        return env

    def get_env(self) -> dict[str, Any]:
        """The course environment (:meth:`CourseSpawnerMixin.get_env
        <scalelab.spawner.course.CourseSpawnerMixin.get_env>`) for the pod: credentials as
        ``valueFrom.secretKeyRef`` of :attr:`store_secret_name`, never as values.

        Raises
        ------
        ValueError, jupyterhub.spawner.SpawnException
            As the course layer's; :meth:`gpu_settings`.
        """
        plain, _ = split_secret_env(self._environment(), self.secret_keys(), self.store_secret_name)
        return plain

    def get_store_secret_manifest(self) -> V1Secret:
        """The Secret holding this server's credentials (``stringData``; see :meth:`get_env`)."""
        _, data = split_secret_env(self._environment(), self.secret_keys(), self.store_secret_name)
        labels = self._build_common_labels(self._expand_all(self.extra_labels))
        annotations = self._build_common_annotations(self._expand_all(self.extra_annotations))
        return V1Secret(
            api_version="v1",
            kind="Secret",
            metadata=V1ObjectMeta(
                name=self.store_secret_name, labels=labels, annotations=annotations
            ),
            type="Opaque",
            string_data=data,
        )

    def own_network(self) -> bool:
        """A pod has a network namespace of its own."""
        return True

    def get_network_policy_manifest(self) -> dict[str, Any]:
        """This server's NetworkPolicy (:func:`~scalelab.spawner.kube.server_network_policy`),
        named as its Secret (:attr:`store_secret_name`).

        Raises
        ------
        ValueError
            An egress rule of ``network_policy_egress`` that is not one.
        """
        pod_labels = self._build_pod_labels({})
        selector = {
            key: pod_labels[key]
            for key in ("hub.jupyter.org/username", "hub.jupyter.org/servername", "component")
        }
        hub_url = self.hub.api_url if self.hub is not None else ""
        return server_network_policy(
            self.store_secret_name,
            selector,
            self.port,
            hub_labels=self.network_policy_hub_labels,
            hub_port=urlsplit(hub_url).port or 8081,
            public_egress=self.network_policy_public_egress,
            egress=self.network_policy_egress,
            labels=self._build_common_labels(self._expand_all(self.extra_labels)),
        )

    async def get_pod_manifest(self):
        """KubeSpawner's pod, with the granted GPUs: resource limits and requests (``count``),
        or node selector and RuntimeClass (``exact``)."""
        pod = await super().get_pod_manifest()
        gpu = self.gpu_settings()
        resources = pod.spec.containers[0].resources
        resources.limits = {**(resources.limits or {}), **gpu["extra_resource_limits"]}
        resources.requests = {**(resources.requests or {}), **gpu["extra_resource_guarantees"]}
        if "node_selector" in gpu:
            pod.spec.node_selector = {**(pod.spec.node_selector or {}), **gpu["node_selector"]}
        if "extra_pod_config" in gpu:
            pod.spec.runtime_class_name = gpu["extra_pod_config"]["runtimeClassName"]
        return pod

    async def load_user_options(self) -> None:
        """Apply ``profile_overrides`` of the granted profile (ScaleLab validated the options
        before the GPUs were granted, with the profile's ``mem_limit`` and ``cpu_limit``;
        KubeSpawner's ``profile_list`` is not read), then make the student's home in the store
        where the store needs the hub to (``prepare_store_home``). The settings a previous
        start's profile changed go back to their values first:
        JupyterHub keeps a server's spawner object from one start to the next. KubeSpawner's
        start awaits this first, before the Secret and the pod."""
        if self._request is None:
            await self.apply_scalelab_options(self.user_options)
        assert self._request is not None
        for name, value in (self._before_overrides or {}).items():
            setattr(self, name, value)
        # the profile's mem_limit and cpu_limit again: a previous start's override restored
        # above may have been one of them (overrides win over the profile's limits)
        self._apply_profile_limits(self._request.profile)
        overrides = self.profile_overrides.get(self._request.profile.slug) or {}
        self._before_overrides = {name: copy.deepcopy(getattr(self, name)) for name in overrides}
        for name, value in overrides.items():
            self._override(name, value)
        await self.prepare_store_home()

    def _override(self, name: str, value: Any) -> None:
        """Set the KubeSpawner setting ``name`` as ``kubespawner_override`` does: a callable is
        called with the spawner, a dict is merged into a dict setting (a None value removes its
        key), anything else replaces the setting."""
        if callable(value):
            value = value(self)
        current = getattr(self, name)
        if isinstance(value, dict) and isinstance(current, dict):
            recursive_update(current, value)
        else:
            setattr(self, name, value)

    # -- create and delete -----------------------------------------------------------------------

    async def _make_create_pod_request(self, pod, request_timeout):
        """Create the server's Secret, then the pod. A leftover pod of the same name is deleted
        first, so that KubeSpawner's own conflict handling (a stop, which would give back the
        GPUs just granted) never runs."""
        await exponential_backoff(
            partial(self._ensure_not_exists, "pod", self.pod_name),
            f"Could not delete the leftover pod {self.pod_name}",
            timeout=self.k8s_api_request_retry_timeout,
        )
        await self._replace_resource("secret", self.get_store_secret_manifest())
        if self.network_policy:
            await self._replace_network_policy(self.get_network_policy_manifest())
        return await super()._make_create_pod_request(pod, request_timeout)

    async def _replace_resource(self, kind: str, manifest: Any) -> None:
        name = manifest.metadata.name
        await exponential_backoff(
            partial(self._ensure_not_exists, kind, name),
            f"Could not delete the old {kind} {name}",
            timeout=self.k8s_api_request_retry_timeout,
        )
        await exponential_backoff(
            partial(self._make_create_resource_request, kind, manifest),
            f"Could not create {kind} {name}",
            timeout=self.k8s_api_request_retry_timeout,
        )

    def _networking(self) -> Any:
        """The NetworkingV1Api client (KubeSpawner's shared one)."""
        if self.networking_api is None:
            self.networking_api = shared_client("NetworkingV1Api")
        return self.networking_api

    async def _retry_step(self, call: Any, *, success: bool, status: int, then: bool) -> bool:
        """One try of ``call()`` (within ``k8s_api_request_timeout``) for
        ``exponential_backoff``: ``success`` when it succeeds, ``then`` when the API answers
        ``status``; any other API error is raised."""
        try:
            await asyncio.wait_for(call(), self.k8s_api_request_timeout)
        except ApiException as exc:
            if exc.status == status:
                return then
            raise
        return success

    async def _network_policy_gone(self, name: str) -> bool:
        """Delete the NetworkPolicy ``name``; True once it is not there (404), as KubeSpawner's
        ``_ensure_not_exists`` for the resources of its own client."""
        delete = partial(self._networking().delete_namespaced_network_policy, name, self.namespace)
        return await self._retry_step(delete, success=False, status=404, then=True)

    async def _network_policy_made(self, manifest: dict[str, Any]) -> bool:
        """Create ``manifest``; False while an old one of its name is still being deleted
        (409)."""
        api = self._networking()
        create = partial(api.create_namespaced_network_policy, self.namespace, manifest)
        return await self._retry_step(create, success=True, status=409, then=False)

    async def _replace_network_policy(self, manifest: dict[str, Any]) -> None:
        name = manifest["metadata"]["name"]
        await exponential_backoff(
            partial(self._network_policy_gone, name),
            f"Could not delete the old network policy {name}",
            timeout=self.k8s_api_request_retry_timeout,
        )
        await exponential_backoff(
            partial(self._network_policy_made, manifest),
            f"Could not create network policy {name}",
            timeout=self.k8s_api_request_retry_timeout,
        )

    async def stop(self, now=False):
        """Delete the pod (KubeSpawner), give back the GPUs (ScaleLab), delete the Secret and
        the NetworkPolicy."""
        try:
            await super().stop(now=now)
        finally:
            name = self.store_secret_name
            leftovers = [(partial(self._ensure_not_exists, "secret", name), "Secret")]
            if self.network_policy:
                leftovers.append((partial(self._network_policy_gone, name), "NetworkPolicy"))
            for gone, kind in leftovers:
                try:
                    await exponential_backoff(
                        gone,
                        f"Could not delete {kind} {name}",
                        timeout=self.k8s_api_request_retry_timeout,
                    )
                except TimeoutError as exc:
                    self.log.error("%s: its %s stays: %s", self.server_key, kind, exc)

    async def progress(self):
        """ScaleLab's queue place and estimate while the GPUs are not granted, then
        KubeSpawner's pod events."""
        async for event in super().progress():
            yield event
            if self._holding is not None and "scalelab_queue" not in event:
                break  # the GPUs were granted, and said so
        async for event in KubeSpawner.progress(self):
            yield event
