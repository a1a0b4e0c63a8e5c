"""ScaleLabKubeSpawner without a cluster, as KubeSpawner's own tests build manifests.

No Kubernetes can run here. So: the pod and Secret manifests ScaleLabKubeSpawner builds (through
KubeSpawner's ``get_pod_manifest``) for each profile and GPU mode are checked against the
Kubernetes API schema (``kubernetes-validate``, strict: an unknown field fails), and the queue
and caps in front of pod creation run against :class:`FakeKubeAPI`, a fake of KubeSpawner's
Kubernetes API client (and of its pod reflector) that schedules pods onto a fake cluster of 4
GPUs: a pod that asks for more GPUs than are free would stay ``Pending`` there.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
import pytest
import pytest_asyncio
from jupyterhub.spawner import SpawnException
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import kube_config
from kubespawner import KubeSpawner
from tornado import web
from traitlets.config import Config

from scalelab.hub_ext.hub.config_check import validate_hub_config
from scalelab.spawner.gpu_pool import GPUPool
from scalelab.spawner.kube_spawner import ScaleLabKubeSpawner

K8S_VERSION = kubernetes_validate.latest_version()
FOUR = [{"uuid": f"GPU-node{n // 2}-{n % 2}"} for n in range(4)]
NODES = {"gpu-node-0": ["GPU-node0-0", "GPU-node0-1"], "gpu-node-1": ["GPU-node1-0", "GPU-node1-1"]}
PROFILES = [
    {"slug": "cpu", "display_name": "CPU only", "default": True},
    {"slug": "gpu-1", "display_name": "1 GPU", "gpus": 1, "mem_limit": "8G", "cpu_limit": 2},
    {"slug": "gpu-2", "display_name": "2 GPUs", "gpus": 2, "groups": ["research"]},
]
STUDENT_KEY = {"key": "AKIA-alice-own-key", "secret": "alice-own-secret-value"}
HUB_TOKEN = "hub-token-of-alice-server"


def as_json(obj: Any) -> Any:
    """A kubernetes_asyncio model as the JSON the API server gets (camelCase, no nulls)."""
    if hasattr(obj, "to_dict"):
        obj = obj.to_dict(serialize=True)
    if isinstance(obj, dict):
        return {k: as_json(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [as_json(v) for v in obj]
    return obj


def group(name: str) -> SimpleNamespace:
    return SimpleNamespace(name=name)


def user(name: str, *groups: str) -> SimpleNamespace:
    return SimpleNamespace(
        name=name,
        id=hash(name) % 1000,
        url=f"/user/{name}/",
        escaped_name=name,
        groups=[group(g) for g in groups],
        admin=False,
    )


@pytest.fixture(autouse=True)
def no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kube config naming a cluster that is not there (KubeSpawner reads one when made; no
    request reaches it: the tests build manifests or use FakeKubeAPI), and a GPU pool of each
    test's own."""
    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "no-cluster",
                "clusters": [{"name": "no-cluster", "cluster": {"server": "https://127.0.0.1:9"}}],
                "contexts": [
                    {"name": "no-cluster", "context": {"cluster": "no-cluster", "user": "nobody"}}
                ],
                "users": [{"name": "nobody", "user": {"token": "none"}}],
            }
        )
    )
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config))
    for name, value in (("_current", None), ("_building", None), ("_restores", [])):
        monkeypatch.setattr(GPUPool, name, value)


def hub_config(tmp_path: Path, **settings: Any) -> Config:
    c = Config()
    c.ScaleLabKubeSpawner.declared_gpus = FOUR
    c.ScaleLabKubeSpawner.profiles = PROFILES
    c.ScaleLabKubeSpawner.store_url = "s3://course/course"
    c.ScaleLabKubeSpawner.store_options = {
        "key": "hub-own-key",
        "secret": "hub-own-secret",
        "endpoint_url": "http://s3.course.svc:8333",
    }
    keys = tmp_path / "s3-keys.json"
    students = ["ann", "ben", "cat", "dan", "eve", "bob"]
    keys.write_text(
        json.dumps(
            {"alice": STUDENT_KEY} | {n: {"key": f"k-{n}", "secret": f"s-{n}"} for n in students}
        )
    )
    keys.chmod(0o600)
    c.ScaleLabKubeSpawner.store_identity_class = "scalelab.spawner.store_identity.S3KeyFile"
    c.S3KeyFile.key_file = str(keys)
    c.ScaleLabKubeSpawner.gpu_queue_file = ""
    c.ScaleLabKubeSpawner.events_enabled = False
    c.ScaleLabKubeSpawner.gpu_nodes = NODES
    c.ScaleLabKubeSpawner.gpu_source_class = "scalelab.spawner.gpu_source.ReportedGPUs"
    for key, value in settings.items():
        setattr(c.ScaleLabKubeSpawner, key, value)
    return c


async def built(spawner: ScaleLabKubeSpawner, options: dict) -> tuple[dict, dict]:
    """Pod and Secret manifests of a start with ``options``, GPUs granted by the allocator."""
    await spawner.apply_scalelab_options(options)
    await spawner.allocate_gpus()
    await spawner.load_user_options()
    return as_json(await spawner.get_pod_manifest()), as_json(spawner.get_store_secret_manifest())


def env_of(pod: dict) -> dict[str, Any]:
    return {
        e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]
    }


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["count", "exact"])
@pytest.mark.parametrize(("profile", "gpus"), [("cpu", 0), ("gpu-1", 1), ("gpu-2", 2)])
async def test_pod_and_secret_manifests_of_each_profile_are_valid_kubernetes(
    tmp_path: Path, mode: str, profile: str, gpus: int
):
    config = hub_config(tmp_path, gpu_mode=mode)
    spawner = ScaleLabKubeSpawner(config=config, user=user("alice", "research"), _mock=True)
    spawner.api_token = HUB_TOKEN
    try:
        pod, secret = await built(spawner, {"profile": profile})
        policy = spawner.get_network_policy_manifest()
    finally:
        await spawner.api.api_client.close()
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    kubernetes_validate.validate(secret, K8S_VERSION, strict=True)
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    container = pod["spec"]["containers"][0]
    # The server's NetworkPolicy selects its pod alone: in, the proxy and hub on its port only.
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert selector["hub.jupyter.org/username"] == "alice" and "component" in selector
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["ports"] == [{"port": spawner.port, "protocol": "TCP"}]
    assert ingress["from"] == [
        {"podSelector": {"matchLabels": {"hub.jupyter.org/network-access-singleuser": "true"}}}
    ]
    # out: the hub's API, DNS, public addresses but no private range (no other student's pod)
    to_hub, dns, public = policy["spec"]["egress"]
    assert to_hub["ports"] == [{"port": 8081, "protocol": "TCP"}]
    assert {p["port"] for p in dns["ports"]} == {53} and "to" not in dns
    assert "10.0.0.0/8" in public["to"][0]["ipBlock"]["except"]
    # The profile's limits (ScaleLab's profiles, not KubeSpawner's profile_list) on the pod.
    limits = container["resources"].get("limits", {})
    if profile == "gpu-1":
        assert (int(limits["memory"]), float(limits["cpu"])) == (8 * 1024**3, 2.0), limits
    else:
        assert "memory" not in limits and "cpu" not in limits
    env = env_of(pod)
    granted = list(spawner.gpu_uuids)
    assert len(granted) == gpus
    if mode == "count" and gpus:
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(gpus)
        assert container["resources"]["requests"]["nvidia.com/gpu"] == str(gpus)
        assert "CUDA_VISIBLE_DEVICES" not in env  # the device plugin's devices, not the ledger's
        assert env["SCALELAB_GPUS"] == ",".join(granted)
        assert "nodeSelector" not in pod["spec"]
    elif mode == "exact" and gpus:
        assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
        assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(granted)
        node = pod["spec"]["nodeSelector"]["kubernetes.io/hostname"]
        assert set(granted) <= set(NODES[node])
        assert pod["spec"]["runtimeClassName"] == "nvidia"
    else:
        assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
        assert env["CUDA_VISIBLE_DEVICES"] == ""
    # a GPU server reports its GPUs' readings to the hub, read on its node (ReportedGPUs)
    assert env.get("SCALELAB_GPU_REPORT_S") == ("30" if gpus else None)
    # Credentials: only in the Secret; the pod names them.
    text = json.dumps(pod)
    for clear in (HUB_TOKEN, STUDENT_KEY["secret"], STUDENT_KEY["key"], "hub-own-secret"):
        assert clear not in text
    ref = {"secretKeyRef": {"name": "jupyter-alice-scalelab", "key": "SCALELAB_STORE_OPTIONS"}}
    assert env["SCALELAB_STORE_OPTIONS"] == ref
    assert env["JUPYTERHUB_API_TOKEN"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
    store_options = json.loads(secret["stringData"]["SCALELAB_STORE_OPTIONS"])
    assert store_options["key"] == STUDENT_KEY["key"]  # the student's own, never the hub's
    assert store_options["endpoint_url"] == "http://s3.course.svc:8333"
    assert secret["stringData"]["JUPYTERHUB_API_TOKEN"] == HUB_TOKEN
    # The course environment.
    assert env["SCALELAB_STORE_URL"] == "s3://course/course"
    assert env["SCALELAB_SPARK_MASTER"] == "local[*]"
    assert container["args"][0] == "jupyterhub-singleuser"
    assert "--MappingKernelManager.default_kernel_name=scalelab-pyspark" in container["args"]
    # a pod's network is its own: jupyter-server-proxy stays on (it is off on Slurm)
    assert not any("jupyter_server_proxy" in arg for arg in container["args"])


@pytest.mark.asyncio
async def test_profile_overrides_set_kubespawner_settings_per_profile(tmp_path: Path):
    config = hub_config(
        tmp_path, profile_overrides={"gpu-1": {"image": "course/cuda:2026", "mem_limit": "32G"}}
    )
    spawner = ScaleLabKubeSpawner(config=config, user=user("alice"), _mock=True)
    try:
        pod, _ = await built(spawner, {"profile": "gpu-1"})
    finally:
        await spawner.api.api_client.close()
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    container = pod["spec"]["containers"][0]
    assert container["image"] == "course/cuda:2026"
    assert container["resources"]["limits"]["memory"] == 32 * 1024**3  # KubeSpawner: bytes
    # the same server started again on the CPU profile: KubeSpawner's settings as configured
    await spawner.release_gpus()
    try:
        pod, _ = await built(spawner, {"profile": "cpu"})
    finally:
        await spawner.api.api_client.close()
    container = pod["spec"]["containers"][0]
    assert container["image"] == "quay.io/jupyterhub/singleuser:latest"
    # (regression: undoing the override put back the gpu-1 profile's own 8G limit on this start)
    assert "memory" not in (container["resources"].get("limits") or {})


@pytest.mark.asyncio
async def test_profile_overrides_merge_dicts_and_call_callables_as_kubespawner_override(
    tmp_path: Path,
):
    """``kubespawner_override``'s meaning: a dict is merged into a dict setting (None removes a
    key), a callable is called with the spawner; the next start's profile gets them back."""
    config = hub_config(
        tmp_path,
        profile_overrides={
            "gpu-1": {
                "extra_labels": {"course": "dl-2026", "tier": None},
                "image": lambda spawner: f"course/{spawner.user.name}:gpu",
            }
        },
    )
    config.ScaleLabKubeSpawner.extra_labels = {"tier": "cpu", "team": "ops"}
    spawner = ScaleLabKubeSpawner(config=config, user=user("alice"), _mock=True)
    try:
        pod, _ = await built(spawner, {"profile": "gpu-1"})
        labels = pod["metadata"]["labels"]
        assert labels["course"] == "dl-2026" and labels["team"] == "ops"
        assert "tier" not in labels  # None removed the configured key
        assert pod["spec"]["containers"][0]["image"] == "course/alice:gpu"
        await spawner.release_gpus()
        pod, _ = await built(spawner, {"profile": "cpu"})
    finally:
        await spawner.api.api_client.close()
    labels = pod["metadata"]["labels"]
    assert labels["tier"] == "cpu" and "course" not in labels  # the configured dict, whole
    assert pod["spec"]["containers"][0]["image"] == "quay.io/jupyterhub/singleuser:latest"


@pytest.mark.asyncio
async def test_an_override_that_is_not_a_kubespawner_setting_is_refused(tmp_path: Path):
    config = hub_config(tmp_path, profile_overrides={"gpu-1": {"imgae": "x"}})
    with pytest.raises(Exception, match=r"\['imgae'\] are not KubeSpawner settings"):
        ScaleLabKubeSpawner(config=config, user=user("alice"), _mock=True)


@pytest.mark.asyncio
async def test_group_profiles_are_offered_to_and_accepted_from_members_only(tmp_path: Path):
    config = hub_config(tmp_path)
    outsider = ScaleLabKubeSpawner(config=config, user=user("alice", "course"), _mock=True)
    member = ScaleLabKubeSpawner(config=config, user=user("bob", "research"), _mock=True)
    try:
        assert 'value="gpu-2"' not in await outsider.render_options_form()
        assert 'value="gpu-2"' in await member.render_options_form()
        with pytest.raises(web.HTTPError) as refused:  # a tampered form, or the REST API
            await outsider.apply_scalelab_options({"profile": "gpu-2"})
        assert refused.value.status_code == 403
        assert "profile 'gpu-2' is for members of the group(s) research only" in str(refused.value)
        assert outsider._request is None  # nothing accepted, nothing allocated
        await member.apply_scalelab_options({"profile": "gpu-2"})
        assert member.requested_gpus == 2
    finally:
        await outsider.api.api_client.close()
        await member.api.api_client.close()


class FakePodReflector:
    """A fake of KubeSpawner's pod reflector: the pods :class:`FakeKubeAPI` holds, as loaded."""

    def __init__(self, pods: dict[str, dict]) -> None:
        self.pods = pods
        self.first_load_future = asyncio.get_running_loop().create_future()
        self.first_load_future.set_result(None)

    async def stop(self) -> None:
        return None


class FakeKubeAPI:
    """A fake of KubeSpawner's CoreV1Api client (no cluster can run here): pods and Secrets
    in one namespace, and a scheduler for ``gpu_capacity`` ``nvidia.com/gpu``: a pod that asks
    for more than are free stays ``Pending``, as on a real cluster."""

    def __init__(self, gpu_capacity: int) -> None:
        self.gpu_capacity = gpu_capacity
        self.pods: dict[str, dict] = {}
        self.secrets: dict[str, dict] = {}
        self.policies: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self._ips = itertools.count(10)

    def _gpus(self, pod: dict) -> int:
        limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
        return int(limits.get("nvidia.com/gpu", 0))

    def used_gpus(self) -> int:
        return sum(self._gpus(p) for p in self.pods.values() if p["status"]["phase"] == "Running")

    async def create_namespaced_pod(self, namespace: str, body: Any) -> None:
        pod = as_json(body)
        self.calls.append(("create pod", pod["metadata"]["name"]))
        fits = self.used_gpus() + self._gpus(pod) <= self.gpu_capacity
        pod["metadata"]["uid"] = str(uuid.uuid4())
        pod["status"] = (
            {
                "phase": "Running",
                "podIP": f"10.0.0.{next(self._ips)}",
                "containerStatuses": [
                    {"name": "notebook", "ready": True, "state": {"running": {}}}
                ],
            }
            if fits
            else {"phase": "Pending", "podIP": None}
        )
        self.pods[f"{namespace}/{pod['metadata']['name']}"] = pod

    async def create_namespaced_secret(self, namespace: str, body: Any) -> None:
        secret = as_json(body)
        self.calls.append(("create secret", secret["metadata"]["name"]))
        self.secrets[secret["metadata"]["name"]] = secret

    async def create_namespaced_network_policy(self, namespace: str, body: Any) -> None:
        """NetworkingV1Api's (ScaleLabKubeSpawner.networking_api)."""
        self.calls.append(("create networkpolicy", body["metadata"]["name"]))
        if body["metadata"]["name"] in self.policies:
            raise ApiException(status=409, reason="AlreadyExists")
        self.policies[body["metadata"]["name"]] = body

    async def delete_namespaced_network_policy(self, name: str, namespace: str, **_: Any):
        await self._delete("networkpolicy", self.policies, name, name)

    async def _delete(self, kind: str, store: dict, key: str, name: str) -> None:
        self.calls.append((f"delete {kind}", name))
        if store.pop(key, None) is None:
            raise ApiException(status=404, reason="Not Found")

    async def delete_namespaced_pod(self, name: str, namespace: str, **_: Any) -> None:
        await self._delete("pod", self.pods, f"{namespace}/{name}", name)

    async def delete_namespaced_secret(self, name: str, namespace: str, **_: Any) -> None:
        await self._delete("secret", self.secrets, name, name)

    async def read_namespaced_pod(self, name: str, namespace: str) -> dict:
        if f"{namespace}/{name}" not in self.pods:
            raise ApiException(status=404, reason="Not Found")
        return self.pods[f"{namespace}/{name}"]

    async def read_namespaced_secret(self, name: str, namespace: str) -> dict:
        if name not in self.secrets:
            raise ApiException(status=404, reason="Not Found")
        return self.secrets[name]


@pytest_asyncio.fixture
async def fake_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[FakeKubeAPI, Config]]:
    api = FakeKubeAPI(gpu_capacity=len(FOUR))
    config = hub_config(tmp_path)
    config.GPUPolicy.max_gpus_per_user = 1
    monkeypatch.setitem(KubeSpawner.reflectors, ("pods", "default"), FakePodReflector(api.pods))
    yield api, config
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def on_fake(api: FakeKubeAPI, config: Config, name: str) -> ScaleLabKubeSpawner:
    spawner = ScaleLabKubeSpawner(config=config, user=user(name), _mock=True)
    spawner.api = api  # the fake, in place of the real client KubeSpawner made
    spawner.networking_api = api  # and of its NetworkingV1Api client
    spawner.api_token = f"token-of-{name}"
    return spawner


async def until(check, what: str, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


@pytest.mark.asyncio
async def test_a_fifth_gpu_student_queues_before_any_pod_and_starts_when_a_gpu_frees(
    fake_cluster: tuple[FakeKubeAPI, Config],
):
    api, config = fake_cluster
    names = ["ann", "ben", "cat", "dan", "eve"]
    spawners = {n: on_fake(api, config, n) for n in names}
    starts = {}
    for name in names:  # one after the other: eve is the fifth in line
        await spawners[name].apply_scalelab_options({"profile": "gpu-1"})
        starts[name] = asyncio.create_task(spawners[name].start())
        if name != "eve":
            assert (await starts[name]).startswith("http://10.0.0.")
    # eve waits in ScaleLab's queue with a place; no pod of hers, none Pending on the cluster
    allocator = await spawners["eve"].gpu_allocator()
    await until(lambda: allocator.status("eve/") is not None, "eve queued")
    status = allocator.status("eve/")
    assert status is not None and status.position == 1
    assert [c for c in api.calls if c[1] == "jupyter-eve"] == []
    assert all(p["status"]["phase"] == "Running" for p in api.pods.values())
    assert api.used_gpus() == 4
    held = [g for s in spawners.values() for g in s.gpu_uuids]
    assert len(held) == len(set(held)) == 4  # no GPU given twice
    assert sorted(api.secrets) == [f"jupyter-{n}-scalelab" for n in names[:4]]
    # ben stops: his pod and Secret go, his GPU goes to eve, whose pod is then created
    freed = spawners["ben"].gpu_uuids
    await spawners["ben"].stop()
    assert "default/jupyter-ben" not in api.pods and "jupyter-ben-scalelab" not in api.secrets
    assert "jupyter-ben-scalelab" not in api.policies
    assert (await asyncio.wait_for(starts["eve"], 30)).startswith("http://10.0.0.")
    assert spawners["eve"].gpu_uuids == freed
    assert api.pods["default/jupyter-eve"]["status"]["phase"] == "Running"
    eve_calls = [c for c in api.calls if "jupyter-eve" in c[1] and c[0].startswith("create")]
    assert eve_calls == [
        ("create secret", "jupyter-eve-scalelab"),
        ("create networkpolicy", "jupyter-eve-scalelab"),
        ("create pod", "jupyter-eve"),
    ]
    # each running server has its own policy; ben's went with his pod
    assert sorted(api.policies) == [f"jupyter-{n}-scalelab" for n in ("ann", "cat", "dan", "eve")]


@pytest.mark.asyncio
async def test_the_queue_shows_its_place_on_the_pending_page(
    fake_cluster: tuple[FakeKubeAPI, Config],
):
    api, config = fake_cluster
    holders = [on_fake(api, config, n) for n in ("ann", "ben", "cat", "dan")]
    for spawner in holders:
        await spawner.apply_scalelab_options({"profile": "gpu-1"})
        await spawner.start()
    eve = on_fake(api, config, "eve")
    await eve.apply_scalelab_options({"profile": "gpu-1"})
    eve._spawn_pending = True  # as JupyterHub marks a start under way
    start = asyncio.create_task(eve.start())
    events = eve.progress()
    first = await asyncio.wait_for(anext(events), 10)
    assert first["scalelab_queue"]["position"] == 1
    assert "you are number 1 of 1 in the queue" in first["message"]
    start.cancel()
    await asyncio.gather(start, return_exceptions=True)
    await events.aclose()
    assert "default/jupyter-eve" not in api.pods


@pytest.mark.asyncio
async def test_the_pending_page_goes_from_the_queue_to_the_granted_gpu_then_the_pod(
    fake_cluster: tuple[FakeKubeAPI, Config],
):
    api, config = fake_cluster
    holders = [on_fake(api, config, n) for n in ("ann", "ben", "cat", "dan")]
    for spawner in holders:
        await spawner.apply_scalelab_options({"profile": "gpu-1"})
        await spawner.start()
    eve = on_fake(api, config, "eve")
    await eve.apply_scalelab_options({"profile": "gpu-1"})
    eve._spawn_pending = True  # as JupyterHub marks a start under way
    start = asyncio.create_task(eve.start())
    events = eve.progress()
    messages = [(await asyncio.wait_for(anext(events), 10))["message"]]
    freed = holders[0].gpu_uuids
    await holders[0].stop()

    async def rest() -> None:  # ScaleLab's events, then KubeSpawner's (pod events: off here)
        async for event in events:
            messages.append(event["message"])

    await asyncio.wait_for(rest(), 15)
    assert "in the queue" in messages[0]
    assert messages[-1] == f"Resources granted ({freed[0]}); starting your server."
    assert (await asyncio.wait_for(start, 30)).startswith("http://10.0.0.")


@pytest.mark.asyncio
async def test_caps_refuse_before_anything_reaches_kubernetes(
    fake_cluster: tuple[FakeKubeAPI, Config],
):
    api, config = fake_cluster
    ann = on_fake(api, config, "ann")
    await ann.apply_scalelab_options({"profile": "gpu-1"})
    await ann.start()
    calls = list(api.calls)
    bob = ScaleLabKubeSpawner(config=config, user=user("bob", "research"), _mock=True)
    bob.api = api
    with pytest.raises(web.HTTPError) as refused:  # max_gpus_per_user = 1
        await bob.apply_scalelab_options({"profile": "gpu-2"})
    assert refused.value.status_code == 409
    assert "GPU" in str(refused.value)
    assert api.calls == calls  # nothing asked of Kubernetes


@pytest.mark.asyncio
async def test_the_store_home_is_made_before_the_secret_and_the_pod(
    fake_cluster: tuple[FakeKubeAPI, Config], unused_tcp_port: int
):
    """With ``HDFSUserIdentity`` the hub makes each student's HDFS home at start
    (``prepare_store_home``, run from KubeSpawner's public ``load_user_options``): against a
    namenode that is not there, the start fails naming it, with nothing made in Kubernetes."""
    api, config = fake_cluster
    config.ScaleLabKubeSpawner.store_url = f"hdfs://127.0.0.1:{unused_tcp_port}/course"
    config.ScaleLabKubeSpawner.store_options = {}
    config.ScaleLabKubeSpawner.store_identity_class = (
        "scalelab.spawner.store_identity.HDFSUserIdentity"
    )
    ann = on_fake(api, config, "ann")
    await ann.apply_scalelab_options({"profile": "cpu"})
    with pytest.raises(SpawnException) as failed:
        await ann.start()
    # An outage, not a setting: 503, the student asked to try again, the namenode in the log.
    assert failed.value.status_code == 503 and failed.value.reason == "store-unavailable"
    assert "Try again in a few minutes" in failed.value.message
    assert f"the namenode at 127.0.0.1:{unused_tcp_port} does not answer" in str(failed.value)
    assert "chown" not in str(failed.value)  # the superuser hint is for refusals only
    assert [c for c in api.calls if c[0].startswith("create")] == []
    assert "jupyter-ann-scalelab" not in api.secrets and "default/jupyter-ann" not in api.pods


@pytest.mark.parametrize("title", ["### Local", "### Kubernetes"])
def test_the_guides_configurations_pass_the_hubs_own_checks(title: str):
    """The operators' guide's "More than one GPU server" configurations, as written, pass the
    validation the hub runs at start (every setting's name and value)."""
    guide = (Path(__file__).resolve().parents[3] / "docs" / "operators-guide.md").read_text()
    section = guide[guide.index("## More than one GPU server") :]
    part = section[section.index(title) :]
    code = re.search(r"```python\n(.*?)```", part, re.S).group(1)
    c = Config()
    exec(compile(code, f"operators-guide.md {title}", "exec"), {"c": c})
    validate_hub_config(c)  # raises ConfigProblem naming the setting
    section_name = "ScaleLabKubeSpawner" if title == "### Kubernetes" else "ScaleLabSpawner"
    assert c[section_name].store_url  # the block configured that spawner
