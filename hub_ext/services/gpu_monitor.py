"""ScaleLab's GPU monitor: a JupyterHub service that applies :func:`culling.decide`.

Run by the hub as ``python -m scalelab.hub_ext.services.gpu_monitor '<settings JSON>'``; every
``poll_interval`` seconds it reads the servers, GPUs and kernels, and for each server moves
``last_activity`` to now, posts the idle-GPU warning, or stops it, logging every reason.
Why: docs/design-notes.md, scalelab.hub_ext.services.gpu_monitor.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

from scalelab.hub_ext.services import lab_toast
from scalelab.hub_ext.services.culling import NONE, STOP, WARN, IdleRules, ServerObservation, decide

log = logging.getLogger("scalelab.gpu_monitor")


@dataclass
class ServerMemory:
    """What the monitor carries between polls for one server."""

    gpu_idle_since: float | None = None
    warned: bool = False


@dataclass
class Monitor:
    """The monitor's state and its calls to the hub (see the module docstring)."""

    api_url: str
    token: str
    rules: IdleRules
    memory: dict[str, ServerMemory] = field(default_factory=dict)
    session: requests.Session = field(default_factory=requests.Session)

    def __post_init__(self) -> None:
        self.session.headers["Authorization"] = f"token {self.token}"

    def _get(self, url: str, **kwargs: Any) -> Any:
        response = self.session.get(url, timeout=30, **kwargs)
        response.raise_for_status()
        return response.json()

    def running_servers(self) -> list[tuple[str, str, dict]]:
        """(user, server name, server model) of every ready server, all pages."""
        found, offset = [], 0
        headers = {"Accept": "application/jupyterhub-pagination+json"}
        while True:
            page = self._get(
                f"{self.api_url}/users",
                params={"state": "active", "offset": offset},
                headers=headers,
            )
            for user in page["items"]:
                for name, server in (user.get("servers") or {}).items():
                    if server.get("ready"):
                        found.append((user["name"], name, server))
            following = (page.get("_pagination") or {}).get("next")
            if not following:
                return found
            offset = following["offset"]

    def gpu_readings(self) -> dict[str, tuple[list[str], dict[str, float]]]:
        """server key ``user/name`` -> (held GPU UUIDs, utilisation % of those readable).

        The readings are the GPU board's (``utilization_pct``, from the hub's GPU source); a GPU
        whose reading is null there is left out: unknown, never idle."""
        board = self._get(f"{self.api_url}/scalelab/gpus")
        held: dict[str, tuple[list[str], dict[str, float]]] = {}
        for gpu in board["gpus"]:
            if not gpu["holder"]:
                continue
            uuids, util = held.setdefault(gpu["holder"]["server"], ([], {}))
            uuids.append(gpu["uuid"])
            if gpu["utilization_pct"] is not None:
                util[gpu["uuid"]] = float(gpu["utilization_pct"])
        return held

    def server_urls(self) -> dict[str, str]:
        """Proxy route (``/user/<name>/[<server>/]``) -> the server's own URL (target + route)."""
        table = self._get(f"{self.api_url}/proxy")
        return {route: entry["target"].rstrip("/") + route for route, entry in table.items()}

    def kernel_busy(self, url: str) -> bool:
        """Whether a kernel of the server at ``url`` is executing; False when it cannot tell."""
        try:
            kernels = self._get(url + "api/kernels", params={"no_track_activity": "1"})
        except (requests.RequestException, ValueError) as exc:
            log.warning("cannot list the kernels at %s: %s", url, exc)
            return False
        return any(k.get("execution_state") == "busy" for k in kernels)

    def mark_active(self, user: str, server: str) -> None:
        now = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
        body = {"servers": {server: {"last_activity": now}}}
        url = f"{self.api_url}/users/{quote(user, safe='')}/activity"
        self.session.post(url, json=body, timeout=30).raise_for_status()

    def notify(self, server_url: str, message: str | None) -> None:
        """Post ``message`` to the notice of the server at ``server_url`` (None clears it)."""
        url = server_url + "scalelab/api/notice"
        if message is None:
            self.session.delete(url, timeout=30)
        else:
            self.session.post(url, json={"message": message}, timeout=30).raise_for_status()

    def toast(self, key: str, server_url: str, payload: dict[str, Any]) -> None:
        """Show ``payload`` in the server's open JupyterLab tabs; a failure is logged only
        (the kernels still get the notice)."""
        try:
            lab_toast.post_toast(self.session, server_url, payload)
        except requests.RequestException as exc:
            log.warning("no JupyterLab notification for %s: %s", key, exc)

    def stop(self, user: str, server: str) -> None:
        path = f"/users/{quote(user, safe='')}/" + (
            f"servers/{quote(server, safe='')}" if server else "server"
        )
        self.session.delete(self.api_url + path, timeout=60).raise_for_status()

    def poll(self, now: float) -> list[tuple[str, str]]:
        """One round over every running server; returns (server key, action) of warns/stops."""
        servers = self.running_servers()
        gpus = self.gpu_readings()
        urls = self.server_urls()
        done = []
        for user, name, model in servers:
            key = f"{user}/{name}"
            url = urls.get(model["url"])
            if url is None:
                log.warning("%s has no proxy route yet; skipped this round", key)
                continue
            memory = self.memory.setdefault(key, ServerMemory())
            uuids, util = gpus.get(key, ([], {}))
            obs = ServerObservation(self.kernel_busy(url), tuple(uuids), util)
            decision = decide(obs, self.rules, now, memory.gpu_idle_since, memory.warned)
            try:
                if decision.active:
                    self.mark_active(user, name)
                if memory.warned and decision.gpu_idle_since is None:
                    self.notify(url, None)  # the idle spell ended: withdraw the warning
                    memory.warned = False
                    self.toast(key, url, lab_toast.idle_gpu_withdrawn(uuids))
                if decision.action == WARN:
                    log.warning("warning %s: %s", key, decision.reason)
                    self.notify(url, decision.reason)
                    memory.warned = True
                    since = decision.gpu_idle_since
                    stop_at = since + self.rules.gpu_idle_timeout_s
                    warning = lab_toast.idle_gpu_warning(uuids, now - since, stop_at, now)
                    self.toast(key, url, warning)
                elif decision.action == STOP:
                    log.warning("stopping %s (files are kept): %s", key, decision.reason)
                    self.stop(user, name)
                    self.memory.pop(key, None)
            except requests.RequestException as exc:
                log.error("%s for %s failed: %s", decision.action, key, exc)
                continue
            if decision.action != STOP:
                memory.gpu_idle_since = decision.gpu_idle_since
            if decision.action != NONE:
                done.append((key, decision.action))
        running = {f"{u}/{n}" for u, n, _ in servers}
        for key in set(self.memory) - running:
            del self.memory[key]
        return done


def main(argv: list[str] | None = None) -> int:
    """Run the monitor until stopped; returns 0 when the hub stops it.

    The hub stops its services with SIGINT (then SIGTERM): either ends the loop quietly, with
    one log line instead of a ``KeyboardInterrupt`` traceback in the hub's log. Both handlers
    are installed here: a hub started with SIGINT ignored (a shell script's background job)
    passes SIG_IGN on, and Python then raises no KeyboardInterrupt of its own.
    """
    argv = sys.argv[1:] if argv is None else argv
    settings = json.loads(argv[0])
    logging.basicConfig(
        level=logging.INFO, format="[%(levelname).1s %(asctime)s scalelab-gpu-monitor] %(message)s"
    )
    monitor = Monitor(
        api_url=os.environ["JUPYTERHUB_API_URL"].rstrip("/"),
        token=os.environ["JUPYTERHUB_API_TOKEN"],
        rules=IdleRules(
            settings["busy_threshold_pct"],
            settings["gpu_idle_timeout"],
            settings["gpu_idle_warning"],
        ),
    )
    log.info("watching kernels and GPUs every %s s: %s", settings["poll_interval"], monitor.rules)
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, _raise_interrupt)
    try:
        while True:
            try:
                monitor.poll(time.time())
            except (requests.RequestException, ValueError, KeyError) as exc:
                log.error("poll failed, retrying in %s s: %s", settings["poll_interval"], exc)
            time.sleep(settings["poll_interval"])
    except KeyboardInterrupt:
        log.info("stopped by the hub")
    return 0


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
