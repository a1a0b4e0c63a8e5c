"""A PySpark kernel's YARN application that waits for room in the queue: told, and cancellable.

YARN keeps an application ``ACCEPTED`` while its queue has no room for its application master;
Spark's start then blocks without a word. While a cell waits for ``spark``, :class:`YarnWait`
looks, after :data:`NOTICE_AFTER_S` seconds, at the ResourceManager's REST API and prints
what holds the cluster (the student's own other applications by name, other students' as a
count) and how to free it; interrupting the cell kills the waiting application (the next use of
``spark`` starts a new one). :func:`wait_report` is pure.
Why: issue 32 ("YARN never silent").
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scalelab import envvars

#: YARN states of an application that has not started yet.
PENDING = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED")
#: Seconds a cell waits for ``spark`` before the notice (``SCALELAB_YARN_WAIT_NOTICE_S``).
NOTICE_AFTER_S = 15.0
#: Seconds to wait for the ResourceManager's REST API.
REST_TIMEOUT_S = 5.0

GetJson = Callable[[str], Any]


def _apps(answer: Any) -> list[dict]:
    """The applications of a ``/ws/v1/cluster/apps`` answer (``{"apps": null}`` when none)."""
    return list(((answer or {}).get("apps") or {}).get("app") or [])


def _tags(app: Mapping[str, Any]) -> list[str]:
    return str(app.get("applicationTags") or "").split(",")


def _reason(diagnostics: str) -> str:
    """YARN's diagnostics of a waiting application, short: without its time stamp and the
    ``Details :`` of its resource sums (pure)."""
    text = " ".join(diagnostics.split())
    text = re.sub(r"^\[[^\]]*\]\s*", "", text).split(" Details")[0]
    return text if len(text) <= 200 else text[:197] + "..."


def _mb(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and value > 0 else 0


def wait_report(
    waiting: Mapping[str, Any],
    running: Sequence[Mapping[str, Any]],
    metrics: Mapping[str, Any],
    own_names: Sequence[str],
    waited_s: float,
) -> str:
    """What the student reads while their application waits (pure).

    Parameters
    ----------
    waiting
        The waiting application, as the ResourceManager's REST API describes it (``id``,
        ``queue``, ``state``, ``diagnostics``).
    running
        The other applications that hold containers (``id``, ``name``, ``user``,
        ``allocatedMB``, ``elapsedTime`` in ms).
    metrics
        ``/ws/v1/cluster/metrics``'s ``clusterMetrics`` (``allocatedMB``, ``totalMB``).
    own_names
        Application names that are the student's own (their kernels' ``spark.app.name``).
    waited_s
        Seconds the cell has waited.
    """
    queue = waiting.get("queue") or "default"
    diagnostics = _reason(str(waiting.get("diagnostics") or ""))
    lines = [
        f"ScaleLab: your Spark application {waiting.get('id')} has waited {waited_s:.0f} s for "
        f"room in YARN queue '{queue}' (state {waiting.get('state')}"
        + (f": {diagnostics})." if diagnostics else ").")
    ]
    allocated, total = _mb(metrics.get("allocatedMB")), _mb(metrics.get("totalMB"))
    if total:
        lines.append(f"The cluster's containers hold {allocated:,} of {total:,} MB:")
    own = [a for a in running if a.get("name") in own_names]
    others = [a for a in running if a.get("name") not in own_names]
    for app in own:
        minutes = _mb(app.get("elapsedTime")) // 60000
        lines.append(
            f"  - yours: {app.get('id')} ({_mb(app.get('allocatedMB')):,} MB, running "
            f"{minutes} min), another of your notebooks' Spark"
        )
    if others:
        held = sum(_mb(a.get("allocatedMB")) for a in others)
        users = len({a.get("user") for a in others})
        lines.append(f"  - others: {len(others)} application(s) of {users} user(s), {held:,} MB")
    if own:
        lines.append(
            "To free room: shut down the kernels of your other PySpark notebooks (the Running "
            "tab, or Kernel > Shut Down Kernel), or run spark.stop() in them."
        )
    else:
        lines.append("The room is held by others' work: wait, or ask the course's operators.")
    lines.append(
        "This cell keeps waiting until YARN starts the application; to give up, interrupt the "
        "kernel: ScaleLab then cancels it, and the next use of spark starts a new one."
    )
    return "\n".join(lines)


class YarnWait:
    """The notice and the cancel for a kernel's application on the YARN of ResourceManager web
    address ``rm_web`` (``host:port``): the application tagged ``tag`` (``spark.yarn.tags``,
    :func:`scalelab.kernels.spark_yarn.kernel_tag`); ``app_name`` names the student's others.

    ``get_json`` (URL) and ``put_json`` (URL, body, the application's user) do the HTTP calls
    (default: ``requests`` with :data:`REST_TIMEOUT_S`); ``out`` prints (default: the
    notebook's stdout).
    """

    def __init__(
        self,
        rm_web: str,
        app_name: str,
        tag: str,
        notice_after_s: float = NOTICE_AFTER_S,
        get_json: GetJson | None = None,
        put_json: Callable[[str, dict, str], Any] | None = None,
        out: Callable[[str], None] | None = None,
    ) -> None:
        self.base = f"http://{rm_web}/ws/v1/cluster"
        self.app_name = app_name
        self.tag = tag.lower()  # YARN keeps tags in lower case
        self.notice_after_s = notice_after_s
        self.get_json = get_json or _get_json
        self.put_json = put_json or _put_json
        self.out = out or (lambda text: print(text, flush=True))

    def waiting(self) -> list[dict]:
        """This kernel's applications that YARN has not started yet."""
        answer = self.get_json(f"{self.base}/apps?states={','.join(PENDING)}")
        return [a for a in _apps(answer) if self.tag in _tags(a)]

    def notice(self, waited_s: float) -> bool:
        """Called while a cell waits for ``spark``: after :attr:`notice_after_s` seconds, print
        what holds this kernel's waiting application; True once printed. A ResourceManager
        that does not answer, no application yet, or one whose application master has its
        container (starting, not waiting for room) prints nothing."""
        if waited_s < self.notice_after_s:
            return False
        try:
            # Only an application that holds nothing waits for room: one whose application
            # master has its container is starting (slowly, on a busy cluster), not queued.
            waiting = [a for a in self.waiting() if not _mb(a.get("allocatedMB"))]
            if not waiting:
                return False
            answer = self.get_json(f"{self.base}/apps?states=RUNNING,ACCEPTED")
            running = [
                a for a in _apps(answer) if _mb(a.get("allocatedMB")) and self.tag not in _tags(a)
            ]
            metrics = (self.get_json(f"{self.base}/metrics") or {}).get("clusterMetrics") or {}
        except Exception:  # noqa: BLE001 -- the notice is a courtesy; Spark's own wait goes on
            return False
        self.out(wait_report(waiting[0], running, metrics, [self.app_name], waited_s))
        return True

    def cancel(self) -> list[str]:
        """Kill this kernel's waiting applications (the cell was interrupted); returns their
        ids, and prints what was done."""
        try:
            waiting = self.waiting()
            for app in waiting:
                url = f"{self.base}/apps/{app['id']}/state"
                self.put_json(url, {"state": "KILLED"}, app.get("user") or "")
            ids = [app["id"] for app in waiting]
        except Exception as exc:  # noqa: BLE001 -- requests' and the RM's errors alike
            self.out(f"ScaleLab: could not cancel the waiting Spark application: {exc}")
            return []
        if ids:
            self.out(
                f"ScaleLab: cancelled the waiting Spark application {', '.join(ids)}; the next "
                "use of spark starts a new one."
            )
        return ids


def _get_json(url: str) -> Any:
    import requests

    answer = requests.get(url, timeout=REST_TIMEOUT_S, headers={"Accept": "application/json"})
    answer.raise_for_status()
    return answer.json()


def _put_json(url: str, body: dict, user: str) -> Any:
    import requests

    # Hadoop's simple authentication: the application's own user asks (a Kerberos cluster's
    # ResourceManager wants SPNEGO instead, and answers 401: the notice says so).
    params = {"user.name": user} if user else {}
    answer = requests.put(url, json=body, params=params, timeout=REST_TIMEOUT_S)
    answer.raise_for_status()
    return answer.json() if answer.content else None


def yarn_wait(conf: Mapping[str, str], environ: Mapping[str, str]) -> YarnWait | None:
    """The :class:`YarnWait` of a kernel whose Spark ``conf`` runs on YARN, its ResourceManager
    read from ``$HADOOP_CONF_DIR``'s yarn-site.xml; None when there is none to ask."""
    from scalelab.kernels.spark_yarn import (
        CONF_DIR_VARIABLES,
        kernel_tag,
        resourcemanager_web_address,
    )
    from scalelab.store.access.hdfs import read_hadoop_conf
    from scalelab.store.errors import StoreConfigError

    folder = next((environ[n] for n in CONF_DIR_VARIABLES if environ.get(n)), None)
    try:
        rm_web = resourcemanager_web_address(read_hadoop_conf(folder, ("yarn-site.xml",)))
    except StoreConfigError:
        return None
    if rm_web is None:
        return None
    try:
        notice = float(environ.get(envvars.YARN_WAIT_NOTICE_S) or NOTICE_AFTER_S)
    except ValueError:
        print(f"ScaleLab: ignored {envvars.YARN_WAIT_NOTICE_S}: not seconds", file=sys.stderr)
        notice = NOTICE_AFTER_S
    return YarnWait(rm_web, conf.get("spark.app.name", ""), kernel_tag(), notice)
