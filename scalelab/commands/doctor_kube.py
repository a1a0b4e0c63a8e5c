"""``scalelab doctor``'s checks of a hub whose servers are Kubernetes pods (KubeSpawner).

The hub's Kubernetes client configuration, loaded as KubeSpawner loads it
(``kubespawner.clients.load_config``: the pod's service account, else ``KUBECONFIG``, then
``k8s_api_host`` and ``k8s_api_ssl_ca_cert``); the API server answering (``GET /version``); the
spawner's namespace existing; and the hub's account allowed to create pods there (a
``SelfSubjectAccessReview``, the question ``kubectl auth can-i create pods`` asks). Each looks
only; none creates a pod.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from scalelab.commands.doctor_report import FAIL, OK, WARN, Check

#: Seconds each request to the API server may take.
REQUEST_TIMEOUT_S = 10.0
#: Where a pod's service account names its namespace (KubeSpawner's default namespace).
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def default_namespace() -> str:
    """KubeSpawner's default ``namespace``: the hub pod's own, else ``default``."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def kube_settings(spawner: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of :func:`kube_checks` from the spawner's section (pure but for the
    default namespace)."""
    return {
        "namespace": str(spawner.get("namespace") or default_namespace()),
        "user_namespaces": bool(spawner.get("enable_user_namespaces", False)),
        "host": str(spawner.get("k8s_api_host") or "") or None,
        "ssl_ca_cert": str(spawner.get("k8s_api_ssl_ca_cert") or "") or None,
        "verify_ssl": spawner.get("k8s_api_verify_ssl"),
    }


def kube_checks(
    namespace: str,
    user_namespaces: bool = False,
    host: str | None = None,
    ssl_ca_cert: str | None = None,
    verify_ssl: bool | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> list[Check]:
    """The API server, the namespace and the right to create pods there; never raises."""
    from kubespawner.clients import load_config

    fix = (
        "Run the hub in the cluster with a service account, or set KUBECONFIG (or "
        "~/.kube/config) for the hub's user; c.ScaleLabKubeSpawner.k8s_api_host overrides the "
        "address."
    )
    try:
        load_config.cache_clear()  # read the configuration of now, not of an earlier call
        load_config(host=host, ssl_ca_cert=ssl_ca_cert, verify_ssl=verify_ssl)
    except Exception as exc:  # noqa: BLE001 - kubernetes_asyncio raises many kinds here
        detail = f"no Kubernetes client configuration: {type(exc).__name__}: {exc}"
        return [Check("Kubernetes API", FAIL, detail, fix)]
    return asyncio.run(_ask(namespace, user_namespaces, timeout_s, fix))


async def _ask(namespace: str, user_namespaces: bool, timeout_s: float, fix: str) -> list[Check]:
    from kubernetes_asyncio import client

    async with client.ApiClient() as api:
        where = api.configuration.host
        try:
            version = await asyncio.wait_for(client.VersionApi(api).get_code(), timeout_s)
        except Exception as exc:  # noqa: BLE001 - unreachable, TLS, refused: each named
            detail = f"{where} does not answer: {_reason(exc)}"
            return [Check("Kubernetes API", FAIL, detail, fix)]
        checks = [Check("Kubernetes API", OK, f"Kubernetes {version.git_version} at {where}")]
        if user_namespaces:
            checks.append(
                Check(
                    "Kubernetes namespace",
                    OK,
                    "one namespace per student (enable_user_namespaces): KubeSpawner makes each",
                )
            )
        else:
            checks.append(await _namespace(api, namespace, timeout_s))
        checks.append(await _may_create_pods(api, namespace, user_namespaces, timeout_s))
        return checks


async def _namespace(api: Any, namespace: str, timeout_s: float) -> Check:
    from kubernetes_asyncio import client

    try:
        await asyncio.wait_for(client.CoreV1Api(api).read_namespace(namespace), timeout_s)
    except Exception as exc:  # noqa: BLE001 - an API answer (its status) or no answer: named
        status = getattr(exc, "status", None)
        if status == 404:
            return Check(
                "Kubernetes namespace",
                FAIL,
                f"namespace {namespace!r} does not exist",
                f"kubectl create namespace {namespace}, or set "
                "c.ScaleLabKubeSpawner.namespace to the course's namespace.",
            )
        if status == 403:  # a namespaced role may not read namespaces: not a fault
            return Check(
                "Kubernetes namespace",
                WARN,
                f"namespace {namespace!r}: the hub's account may not read namespaces, so "
                "whether it exists is unknown",
                f"kubectl get namespace {namespace} as a cluster admin.",
            )
        return Check("Kubernetes namespace", FAIL, f"{namespace!r}: {_reason(exc)}", "")
    return Check("Kubernetes namespace", OK, f"namespace {namespace!r} exists")


async def _may_create_pods(
    api: Any, namespace: str, user_namespaces: bool, timeout_s: float
) -> Check:
    from kubernetes_asyncio import client

    where = "any namespace" if user_namespaces else f"namespace {namespace!r}"
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                namespace=None if user_namespaces else namespace, verb="create", resource="pods"
            )
        )
    )
    try:
        answer = await asyncio.wait_for(
            client.AuthorizationV1Api(api).create_self_subject_access_review(review), timeout_s
        )
    except Exception as exc:  # noqa: BLE001
        return Check("Kubernetes pods", WARN, f"could not ask ({_reason(exc)})", "")
    if not answer.status.allowed:
        reason = f" ({answer.status.reason})" if answer.status.reason else ""
        return Check(
            "Kubernetes pods",
            FAIL,
            f"the hub's account may not create pods in {where}{reason}",
            "Bind the hub's service account to a Role that may create, get, list, watch and "
            "delete pods (and secrets, services, persistentvolumeclaims): Zero to JupyterHub's "
            "hub Role is the model.",
        )
    return Check("Kubernetes pods", OK, f"the hub's account may create pods in {where}")


def _reason(exc: BaseException) -> str:
    """An API or connection error in one line."""
    status = getattr(exc, "status", None)
    if status:
        return f"HTTP {status} {getattr(exc, 'reason', '')}".rstrip()
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
