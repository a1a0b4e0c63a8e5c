"""The "Get new labs" page and API of ScaleLab's server extension.

``GET``/``POST <base_url>scalelab/labs`` (the page) and ``POST <base_url>scalelab/api/labs/sync``
(JSON :class:`~scalelab.hub_ext.labs.sync.SyncReport`; 507 or 500 with one line) run
:func:`~scalelab.hub_ext.labs.sync.sync_labs` on the server's root folder.
Why: docs/design-notes.md, scalelab.hub_ext.server.labs_handlers.
"""

from __future__ import annotations

import asyncio
import errno
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

    Labs that a sync refuses (:func:`~scalelab.hub_ext.labs.sync.lab_problem`) are left out.
    Reads the home's manifest through :func:`~scalelab.hub_ext.labs.sync.read_manifest`: a
    malformed one reads as what it holds that is well-formed, and is left for the sync to set
    aside. Raises ``OSError`` only when the released labs cannot be read."""
    labs = read_manifest(Path(home))["labs"]
    status = []
    for name, content in bundled_labs().items():
        if lab_problem(name, content):
            continue
        entry = labs.get(name, {})
        pending = entry.get("release") != hashlib.sha256(content).hexdigest()
        status.append({"name": name, "version": entry.get("version", 0), "pending": pending})
    return status


def _one_line(text: str) -> str:
    return " ".join(text.split())


async def _sync(root_dir: str, log: Any) -> tuple[SyncReport | None, int, str | None]:
    """Run the sync in a thread: (report, 200, None), or (None, HTTP status, one line for the
    student) when it stopped: 507 for a full disk or quota, 500 otherwise. Logs each of the
    report's ``warnings`` to ``log`` as a warning, a stop as an error (with the traceback only
    for what is not an ``OSError``: a bug)."""
    try:
        report = await asyncio.to_thread(sync_labs, root_dir)
    except OSError as exc:
        reason = _one_line(exc.strerror or str(exc) or type(exc).__name__)
        if exc.filename:
            reason += f" ({exc.filename})"
        log.error("ScaleLab could not copy the course labs into %s: %s", root_dir, reason)
        complete = "Your files are complete (each is the old or the new version)"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            advice, status = "free some space in your home and try again", 507
        else:
            advice, status = "tell your instructor what this says", 500
        return None, status, f"Copying the labs stopped: {reason}. {complete}; {advice}."
    except Exception as exc:  # a bug: one line for the student, the traceback in the log
        log.exception("ScaleLab's labs sync failed in %s", root_dir)
        failed = f"{type(exc).__name__}: {_one_line(str(exc))}"
        message = (
            f"Copying the labs failed: an error in ScaleLab ({failed}); none of your notebooks "
            "was overwritten. Tell your instructor: the details are in your server's log."
        )
        return None, 500, message
    for line in report.warnings:
        log.warning("ScaleLab labs sync in %s: %s", root_dir, line)
    return report, 200, None


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
        report, status, error = await _sync(self.settings["server_root_dir"], self.log)
        self.set_status(status)
        self.finish(self._render(report, error))


class LabsSyncAPIHandler(APIHandler):
    auth_resource = "contents"

    @web.authenticated
    @authorized
    async def post(self) -> None:
        report, status, error = await _sync(self.settings["server_root_dir"], self.log)
        self.set_status(status)
        if error:
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
