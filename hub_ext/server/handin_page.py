"""The "Hand In" page of ScaleLab's server extension (JupyterLab's *Course → Hand In…*).

``GET <base_url>scalelab/handin`` lists the course's released labs, whether each is in the
server's root folder, and the versions handed in (from the hub); ``POST`` with ``lab`` hands in
``<lab>.ipynb`` of the root folder through the hub's hand-in API
(:mod:`scalelab.hub_ext.labs.handin_client`) and shows the receipt; with ``action=feedback`` it
fetches the lab's feedback into the root folder, never over a file of the student's.
Why: docs/design-notes.md, scalelab.hub_ext.labs.handin.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

from scalelab.hub_ext.labs.handin_client import (
    HandInFailed,
    fetch_feedback,
    lab_of,
    place_feedback,
    receipt_line,
    send,
)
from scalelab.hub_ext.labs.handin_client import submissions as hub_submissions
from scalelab.hub_ext.labs.sync import bundled_labs
from scalelab.templates import templates_dir

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=True)


def lab_rows(root: Path, labs: Sequence[str], receipts: Sequence[Mapping]) -> list[dict]:
    """One row per lab (pure, but for looking at ``root``): ``name``, ``file`` (the notebook's
    name), ``present`` (whether ``root`` holds it as a file) and ``versions`` (its receipts'
    lines, oldest first)."""
    rows = []
    for name in labs:
        lab = lab_of(name)
        rows.append(
            {
                "name": lab,
                "file": f"{lab}.ipynb",
                "present": (root / f"{lab}.ipynb").is_file(),
                "versions": [receipt_line(r) for r in receipts if r.get("lab") == lab],
            }
        )
    return rows


class HandInPageHandler(JupyterHandler):
    """The page (see the module docstring)."""

    auth_resource = "contents"

    async def _render(
        self, receipt: dict | None = None, error: str | None = None, note: str | None = None
    ) -> str:
        root = Path(self.settings["server_root_dir"]).expanduser()
        labs: list[str] = []
        try:
            labs = sorted(bundled_labs())
        except OSError as exc:
            error = error or f"The course's labs cannot be read: {exc}"
        try:
            receipts = await asyncio.to_thread(hub_submissions, None)
        except HandInFailed as exc:
            receipts, error = [], error or f"Your hand-ins could not be listed: {exc}"
        return _env.get_template("handin.html").render(
            labs=lab_rows(root, labs, receipts),
            receipt=receipt_line(receipt) if receipt else None,
            path=receipt["path"] if receipt else None,
            error=error,
            note=note,
            xsrf=self.xsrf_token.decode("ascii"),
        )

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(await self._render())

    @web.authenticated
    @authorized
    async def post(self) -> None:
        lab = lab_of(self.get_body_argument("lab", ""))
        root = Path(self.settings["server_root_dir"]).expanduser()
        if self.get_body_argument("action", "hand-in") == "feedback":
            await self._feedback(root, lab)
            return
        try:
            released = {lab_of(name) for name in bundled_labs()}
        except OSError:
            released = set()
        notebook = root / f"{lab}.ipynb"
        if lab not in released:
            self.set_status(400)
            self.finish(await self._render(error=f"{lab!r} is not one of the course's labs."))
            return
        try:
            content = await asyncio.to_thread(notebook.read_bytes)
            receipt = await asyncio.to_thread(send, lab, content)
        except FileNotFoundError:
            self.set_status(404)
            message = f"There is no {notebook.name} in your home: save the lab there first."
            self.finish(await self._render(error=message))
            return
        except HandInFailed as exc:  # the hub's message says "Not handed in: ..." itself
            self.set_status(400)
            self.finish(await self._render(error=str(exc)))
            return
        except OSError as exc:
            self.set_status(500)
            self.finish(await self._render(error=f"Not handed in: {notebook.name}: {exc}"))
            return
        self.log.info("ScaleLab: handed in %s, version %s", lab, receipt.get("version"))
        self.finish(await self._render(receipt=receipt))

    async def _feedback(self, root: Path, lab: str) -> None:
        try:
            content = await asyncio.to_thread(fetch_feedback, lab)
            placed = (
                await asyncio.to_thread(place_feedback, root, lab, content) if content else None
            )
        except (HandInFailed, OSError) as exc:
            self.set_status(400 if isinstance(exc, HandInFailed) else 500)
            self.finish(await self._render(error=f"No feedback fetched: {exc}"))
            return
        if placed is None:
            self.finish(await self._render(note=f"No feedback on {lab} yet."))
            return
        note = f"Your feedback on {lab} is in your home: {placed.relative_to(root)}"
        self.finish(await self._render(note=note))


def add_handin_page(serverapp: Any) -> None:
    """Register the page on ``serverapp``'s web application."""
    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(
        ".*$", [(url_path_join(base, "scalelab/handin"), HandInPageHandler)]
    )
