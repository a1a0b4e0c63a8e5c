"""The "Get new labs" page and API of ScaleLab's server extension.

- ``GET <base_url>scalelab/labs``: a page listing the course labs, which version the home holds
  and whether a new one is waiting, with a "Get new labs" button (a form POST to the same URL).
- ``POST <base_url>scalelab/labs``: runs :func:`~scalelab.hub_ext.labs.sync.sync_labs` on the
server's root folder and shows its messages.
- ``POST <base_url>scalelab/api/labs/sync``: the same, answering the
  :class:`~scalelab.hub_ext.labs.sync.SyncReport` as JSON (``copied``, ``updated``, ``beside``,
  ``messages``); 507 with ``{"message": ...}`` when the home is full or not writable.

JupyterLab reaches the page from its "Course" menu (``hub_ext/jupyter-config/lab-overrides.json``,
``help:open`` on ``/hub/user-redirect/scalelab/labs``), so no JupyterLab build is needed. Both
POSTs need the ``contents`` write permission, like saving a file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import jinja2
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

from scalelab.hub_ext.labs.sync import (
    SyncReport,
    bundled_labs,
    lab_problem,
    read_manifest,
    sync_labs,
)
from scalelab.templates import templates_dir

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=True)


def lab_status(home: str) -> list[dict[str, Any]]:
    """Each bundled lab: ``name``, ``version`` delivered (0: never) and ``pending`` (bool).

    Labs that a sync refuses (:func:`~scalelab.hub_ext.labs.sync.lab_problem`) are left out."""
    labs = read_manifest(Path(home))["labs"]
    status = []
    for name, content in bundled_labs().items():
        if lab_problem(name, content):
            continue
        entry = labs.get(name, {})
        pending = entry.get("release") != hashlib.sha256(content).hexdigest()
        status.append({"name": name, "version": entry.get("version", 0), "pending": pending})
    return status


async def _sync(root_dir: str) -> tuple[SyncReport | None, str | None]:
    try:
        return await asyncio.to_thread(sync_labs, root_dir), None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return None, (
            f"Copying the labs stopped: {reason}. Your files are complete (each is the old or the "
            "new version); free some space in your home and try again."
        )


class LabsPageHandler(JupyterHandler):
    auth_resource = "contents"

    def _render(self, report: SyncReport | None, error: str | None) -> str:
        return _env.get_template("labs_sync.html").render(
            labs=lab_status(self.settings["server_root_dir"]),
            report=report,
            error=error,
            xsrf=self.xsrf_token.decode("ascii"),
        )

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(self._render(None, None))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        report, error = await _sync(self.settings["server_root_dir"])
        if error:
            self.set_status(507)
        self.finish(self._render(report, error))


class LabsSyncAPIHandler(APIHandler):
    auth_resource = "contents"

    @web.authenticated
    @authorized
    async def post(self) -> None:
        report, error = await _sync(self.settings["server_root_dir"])
        if error:
            self.set_status(507)
            self.finish(json.dumps({"message": error}))
        else:
            self.finish(json.dumps(report.as_dict()))


def add_lab_handlers(serverapp: Any) -> None:
    """Register the page and the API on ``serverapp``'s web application."""
    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "scalelab/labs"), LabsPageHandler),
            (url_path_join(base, "scalelab/api/labs/sync"), LabsSyncAPIHandler),
        ],
    )
