"""Executor GPUs on a cluster, asked of the hub before the kernel's session starts.

On a cluster master the kernel asks the hub (:mod:`scalelab.hub_ext.hub.spark_gpus`) for the
GPUs its session's executors will use (:func:`executor_gpus`, pure), builds no session when
refused (``spark`` says why), and gives the grant back when the session stops or the kernel exits.
Why: docs/design-notes.md, scalelab.kernels.spark_gpu_grant.
"""

from __future__ import annotations

import atexit
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

#: Seconds the kernel waits for the hub's answer.
HUB_TIMEOUT_S = 10.0
#: Executors of a YARN application that sets none (Spark's default).
YARN_DEFAULT_EXECUTORS = 2


class ExecutorGPUsRefused(RuntimeError):
    """The session's executor GPUs cannot be granted; the message is one paragraph for the
    student (what was asked, why not, what to change)."""


def is_cluster(master: str) -> bool:
    """Whether ``master`` runs executors on a cluster: standalone or YARN (pure)."""
    return master.startswith("spark://") or master.split("-", 1)[0] == "yarn"


def _whole(conf: Mapping[str, str], key: str) -> int | None:
    raw = conf.get(key)
    if raw is None or not str(raw).strip():
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ExecutorGPUsRefused(
            f"ScaleLab did not start Spark: {key}={raw!r} is not a whole number. Set it to "
            "a whole number (e.g. 1)."
        ) from None
    if value < 0:
        raise ExecutorGPUsRefused(f"ScaleLab did not start Spark: {key}={raw} is negative.")
    return value


def executor_gpus(conf: Mapping[str, str]) -> tuple[int, str]:
    """GPUs a session with ``conf`` asks its cluster for, and how they add up in words (pure).

    Returns
    -------
    (int, str)
        The GPUs (0 when ``spark.executor.resource.gpu.amount`` is unset or 0), and e.g.
        ``"spark.executor.resource.gpu.amount=1 x spark.executor.instances=4"``.

    Raises
    ------
    ExecutorGPUsRefused
        A setting is not a whole number, or the executors cannot be counted (dynamic
        allocation without ``spark.dynamicAllocation.maxExecutors``, a standalone master
        without a number of executors): the message names the setting to add.
    """
    per_executor = _whole(conf, "spark.executor.resource.gpu.amount") or 0
    if not per_executor:
        return 0, ""
    master = conf.get("spark.master", "")
    amount = f"spark.executor.resource.gpu.amount={per_executor}"
    if str(conf.get("spark.dynamicAllocation.enabled", "false")).strip().lower() == "true":
        most = _whole(conf, "spark.dynamicAllocation.maxExecutors")
        if most is None:
            raise ExecutorGPUsRefused(
                f"ScaleLab did not start Spark: with dynamic allocation and {amount}, the "
                "number of executor GPUs has no bound. Set spark.dynamicAllocation."
                "maxExecutors so that the course's GPU limits can be checked."
            )
        return per_executor * most, f"{amount} x spark.dynamicAllocation.maxExecutors={most}"
    instances = _whole(conf, "spark.executor.instances")
    if instances is not None:
        return per_executor * instances, f"{amount} x spark.executor.instances={instances}"
    if master.startswith("spark://"):
        cores_max = _whole(conf, "spark.cores.max")
        cores = _whole(conf, "spark.executor.cores")
        if not cores_max or not cores:
            raise ExecutorGPUsRefused(
                f"ScaleLab did not start Spark: with {amount} on a standalone cluster, the "
                "number of executors is not known. Set spark.executor.instances (or "
                "spark.cores.max and spark.executor.cores) so that the course's GPU limits "
                "can be checked."
            )
        executors = cores_max // cores
        return per_executor * executors, (
            f"{amount} x {executors} executors (spark.cores.max={cores_max} // "
            f"spark.executor.cores={cores})"
        )
    executors = YARN_DEFAULT_EXECUTORS
    return per_executor * executors, f"{amount} x {executors} executors (YARN's default)"


def refusal(gpus: int, how: str, status: int, message: str) -> str:
    """The student's paragraph when the hub answers ``status`` with ``message`` (pure)."""
    why = message.strip() or f"HTTP {status}"
    return (
        f"ScaleLab did not start Spark: your session asks the cluster for {gpus} executor "
        f"GPU(s) ({how}), and the hub refused (HTTP {status}): {why}"
    )


def _url(environ: Mapping[str, str]) -> str:
    api = environ["JUPYTERHUB_API_URL"].rstrip("/")
    return f"{api}/scalelab/users/{quote(environ['JUPYTERHUB_USER'], safe='')}/spark-gpus"


def _under_hub(environ: Mapping[str, str]) -> bool:
    return all(environ.get(k) for k in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN"))


def _call(method: str, url: str, token: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=HUB_TIMEOUT_S) as response:
        text = response.read()
    return json.loads(text) if text else {}


def claim(conf: Mapping[str, str], environ: Mapping[str, str]) -> Callable[[], None] | None:
    """Ask the hub for the session's executor GPUs (I/O: one HTTP request).

    Nothing is asked for a local master, a session without executor GPUs, or a kernel
    outside a hub (no ``JUPYTERHUB_API_URL``/``JUPYTERHUB_API_TOKEN``: no limits to check).

    Returns
    -------
    callable or None
        The release (best effort, safe to call twice; also run when the kernel exits), or
        None when nothing was asked.

    Raises
    ------
    ExecutorGPUsRefused
        The hub refused (its message: the limit and the fix), could not be reached, or the
        executors cannot be counted (:func:`executor_gpus`).
    """
    if not is_cluster(conf.get("spark.master", "")):
        return None
    gpus, how = executor_gpus(conf)
    if not gpus or not _under_hub(environ):
        return None
    url, token = _url(environ), environ["JUPYTERHUB_API_TOKEN"]
    server = environ.get("JUPYTERHUB_SERVER_NAME", "")
    # one grant per kernel: two notebooks' sessions of one name are two applications
    application = f"{conf.get('spark.app.name') or 'scalelab'}-{os.getpid()}"
    try:
        _call("POST", url, token, {"server": server, "application": application, "gpus": gpus})
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read() or b"{}").get("message", "")
        except ValueError:
            message = ""
        raise ExecutorGPUsRefused(refusal(gpus, how, exc.code, message)) from None
    except (OSError, ValueError) as exc:
        raise ExecutorGPUsRefused(
            f"ScaleLab did not start Spark: your session asks the cluster for {gpus} executor "
            f"GPU(s) ({how}), and the hub, which checks the course's GPU limits, could not be "
            f"reached ({exc}). Run the cell again in a minute; without executor GPUs (unset "
            "spark.executor.resource.gpu.amount) the session needs no check."
        ) from None
    released = []

    def release() -> None:
        if released:
            return
        released.append(True)
        query = urlencode({"server": server, "application": application})
        try:
            _call("DELETE", f"{url}?{query}", token)
        except (OSError, ValueError):
            pass  # the hub releases the server's grants when the server stops

    atexit.register(release)
    return release


def release_on_stop(session: Any, release: Callable[[], None]) -> None:
    """Run ``release`` when ``session``'s SparkContext stops (``spark.stop()``, ``sc.stop()``),
    after PySpark's own stop."""
    context = session.sparkContext
    stop = context.stop

    def stop_and_release(*args: Any, **kwargs: Any) -> Any:
        try:
            return stop(*args, **kwargs)
        finally:
            release()

    context.stop = stop_and_release
