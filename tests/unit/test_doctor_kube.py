"""``scalelab doctor`` on a hub whose spawner is ScaleLabKubeSpawner
(``scalelab.commands.doctor_kube``).

No Kubernetes API server can run here, so :class:`FakeKubeAPI` is a **fake** of one: an HTTP
server answering the three requests the doctor makes (``GET /version``, ``GET
/api/v1/namespaces/<name>``, ``POST`` of a ``SelfSubjectAccessReview``) with the JSON the
Kubernetes API returns, and recording them. The doctor runs as an operator runs it (``python -m
scalelab doctor --config``), its client configured by a real kubeconfig file (``KUBECONFIG``)
through KubeSpawner's own loader.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from scalelab.common.ports import free_port
from tests.support.jsonhttp import JSONHandler

VERSION = {
    "major": "1", "minor": "31", "gitVersion": "v1.31.4", "gitCommit": "a78aa47",
    "gitTreeState": "clean", "buildDate": "2024-12-10T00:00:00Z", "goVersion": "go1.22.9",
    "compiler": "gc", "platform": "linux/amd64",
}  # fmt: skip


class FakeKubeAPI:
    """A fake Kubernetes API server (see the module): ``namespaces`` exist, ``may_create_pods``
    is the access review's answer; ``requests`` lists ``(method, path, body)``."""

    def __init__(self, namespaces: set[str], may_create_pods: bool = True) -> None:
        self.namespaces = namespaces
        self.may_create_pods = may_create_pods
        self.requests: list[tuple[str, str, dict]] = []
        fake = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:
                fake.requests.append(("GET", self.path, {}))
                if self.path.rstrip("/") == "/version":
                    return self.reply(200, VERSION)
                name = self.path.removeprefix("/api/v1/namespaces/")
                if name in fake.namespaces:
                    meta = {"name": name}
                    return self.reply(200, {"kind": "Namespace", "metadata": meta})
                status = {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
                return self.reply(404, {**status, "message": f'namespaces "{name}" not found'})

            def do_POST(self) -> None:
                body = self.json_body()
                fake.requests.append(("POST", self.path, body))
                allowed = fake.may_create_pods
                reason = "" if allowed else "no RBAC policy matched"
                status = {"allowed": allowed, **({"reason": reason} if reason else {})}
                return self.reply(201, {**body, "status": status})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # it binds: no race
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _kubeconfig(path: Path, port: int) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "course", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "hub", "user": {"token": "hub-service-account-token"}}],
                "contexts": [{"name": "hub", "context": {"cluster": "course", "user": "hub"}}],
                "current-context": "hub",
            }
        )
    )
    return path


@pytest.fixture
def fake_api() -> Iterator[FakeKubeAPI]:
    api = FakeKubeAPI({"course"})
    yield api
    api.close()


def _doctor(tmp_path: Path, port: int, namespace_line: str = "") -> str:
    config = tmp_path / "hub_config.py"
    config.write_text(
        "c.JupyterHub.spawner_class = 'scalelab.spawner.kube_spawner.ScaleLabKubeSpawner'\n"
        + namespace_line
    )
    config.chmod(0o600)
    env = {**os.environ, "KUBECONFIG": str(_kubeconfig(tmp_path / "kubeconfig", port))}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    done = subprocess.run(
        [sys.executable, "-m", "scalelab", "doctor", "--quick", "--state-dir",
         str(tmp_path / "state"), "--port", str(free_port()), "--config", str(config)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def test_a_healthy_cluster_namespace_and_role(tmp_path: Path, fake_api: FakeKubeAPI):
    out = _doctor(tmp_path, fake_api.port, "c.ScaleLabKubeSpawner.namespace = 'course'\n")
    where = f"http://127.0.0.1:{fake_api.port}"
    assert f"[ ok ] Kubernetes API: Kubernetes v1.31.4 at {where}" in out, out
    assert "[ ok ] Kubernetes namespace: namespace 'course' exists" in out, out
    assert "[ ok ] Kubernetes pods: the hub's account may create pods in namespace 'course'" in out
    # The question asked: may I create pods in that namespace (kubectl auth can-i's review).
    review = [body for method, _path, body in fake_api.requests if method == "POST"]
    attributes = review[0]["spec"]["resourceAttributes"]
    assert attributes == {"namespace": "course", "resource": "pods", "verb": "create"}
    assert "[ ok ] Kernels: in the servers' image (c.ScaleLabKubeSpawner.image)" in out, out
    # Every fix names the settings of the spawner in use.
    assert "Check c.ScaleLabKubeSpawner.store_url and store_options" in out, out
    assert "check c.ScaleLabKubeSpawner.exclude_gpus" in out, out
    assert "c.ScaleLabSpawner." not in out, out


def test_a_missing_namespace_and_a_forbidden_role_are_each_named_with_the_fix(tmp_path: Path):
    api = FakeKubeAPI(set(), may_create_pods=False)
    try:
        out = _doctor(tmp_path, api.port)  # KubeSpawner's default namespace outside a pod
    finally:
        api.close()
    assert "[FAIL] Kubernetes namespace: namespace 'default' does not exist" in out, out
    assert "fix: kubectl create namespace default, or set c.ScaleLabKubeSpawner.namespace" in out
    assert (
        "[FAIL] Kubernetes pods: the hub's account may not create pods in namespace 'default' "
        "(no RBAC policy matched)"
    ) in out, out
    assert "Zero to JupyterHub's hub Role" in out


def test_an_api_server_that_does_not_answer_is_named_with_its_address(tmp_path: Path):
    port = free_port()  # nothing listens there
    out = _doctor(tmp_path, port)
    assert f"[FAIL] Kubernetes API: http://127.0.0.1:{port} does not answer: " in out, out
    assert "fix: Run the hub in the cluster with a service account, or set KUBECONFIG" in out
    assert "Kubernetes namespace" not in out  # nothing more is asked of a server not there
