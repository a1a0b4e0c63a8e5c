"""The page that opens the Spark UI of the student's running kernel, ``<base_url>scalelab/sparkui``.

It reads the records PySpark kernels write (:mod:`scalelab.kernels.spark_ui_record`), keeps
those of kernels that still run, and redirects to the one UI, lists several, or says there is
none; ports come from the records only. Reading needs the ``kernels`` read permission.
Why: docs/design-notes.md, scalelab.hub_ext.server.spark_ui_page.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

from scalelab.hub_ext.server.spark_ui import SPARK_UI_SEGMENT, running_records
from scalelab.kernels.spark_ui_record import SparkUIRecord
from scalelab.templates import templates_dir

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=True)

#: The page's path under the single-user server's base URL.
PAGE_PATH = "scalelab/sparkui"


@dataclass(frozen=True)
class SparkUIEntry:
    """A running kernel's Spark UI, as the page lists it.

    Attributes
    ----------
    url
        The UI's Jobs page, ``<base_url>sparkui/<port>/jobs/``.
    label
        The kernel's notebook path, else its kernel name.
    app_name, app_id
        The Spark application's.
    started
        When its SparkContext started, as local time (``2026-12-03 08:10:05 UTC``).
    """

    url: str
    label: str
    app_name: str
    app_id: str
    started: str


def spark_ui_url(base_url: str, port: int) -> str:
    """``("/user/alice/", 41234)`` -> ``"/user/alice/sparkui/41234/jobs/"``."""
    return url_path_join(base_url, SPARK_UI_SEGMENT, str(port), "jobs/")


def kernel_labels(
    sessions: Iterable[Mapping[str, Any]], kernel_names: Mapping[str, str]
) -> dict[str, str]:
    """Kernel id -> what the page calls it (pure): the path of its notebook (a notebook's
    session before a console's), else its kernel name (``kernel_names``: id -> name).

    ``sessions`` are jupyter_server's session models (``path``, ``type``, ``kernel.id``)."""
    labels = dict(kernel_names)
    ranked = sorted(sessions, key=lambda s: s.get("type") == "notebook")
    for session in ranked:  # a notebook's last, so that it wins
        kernel_id = (session.get("kernel") or {}).get("id")
        if kernel_id and session.get("path"):
            labels[kernel_id] = session["path"]
    return labels


def port_listens(port: int, host: str = "127.0.0.1", timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port`` (a driver's UI that is gone,
    its JVM killed under a running kernel, does not)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _started(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(seconds))


class SparkUIPageHandler(JupyterHandler):
    auth_resource = "kernels"

    @web.authenticated
    @authorized
    async def get(self) -> None:
        manager = self.kernel_manager
        running = set(manager.list_kernel_ids())

        def find() -> list[SparkUIRecord]:
            found = running_records(manager.connection_dir, running)
            return [record for record in found if port_listens(record.port)]

        live = await asyncio.to_thread(find)
        self.set_header("Cache-Control", "no-store")  # which kernel runs Spark changes
        if len(live) == 1:
            self.redirect(spark_ui_url(self.base_url, live[0].port))
            return
        names = {}
        for kernel_id in running:
            try:
                names[kernel_id] = manager.get_kernel(kernel_id).kernel_name
            except KeyError:  # shut down meanwhile
                continue
        labels = kernel_labels(await self.session_manager.list_sessions(), names)
        entries = [
            SparkUIEntry(
                url=spark_ui_url(self.base_url, record.port),
                label=labels.get(record.kernel_id, record.kernel_id),
                app_name=record.app_name,
                app_id=record.app_id,
                started=_started(record.started),
            )
            for record in live
        ]
        self.finish(_env.get_template("spark_ui.html").render(entries=entries))


def setup(serverapp: Any) -> None:
    """Register the page on ``serverapp``'s web application."""
    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(".*$", [(url_path_join(base, PAGE_PATH), SparkUIPageHandler)])
