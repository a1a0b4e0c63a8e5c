"""The hub's feedback API: an instructor returns a graded notebook, its student fetches it.

``PUT /hub/api/scalelab/users/<user>/feedback/<lab>`` (scope ``admin:users``: the course's
instructors; body: the feedback notebook, ``scalelab autograde``'s) keeps it in the course
store's ``feedback/<lab>/<user>/<lab>.ipynb`` (the hub's folder, 0700 like ``submissions/``),
replacing an earlier one, and answers 201; ``GET`` on the same path (scope ``users:activity``:
the student's own server) answers the notebook, or 404 while there is none.
Why: docs/design-notes.md, scalelab.hub_ext.labs.handin.
"""

from __future__ import annotations

from typing import Any

from jupyterhub.scopes import needs_scope
from tornado import web

from scalelab.hub_ext.hub.submissions import StoreAPIHandler, make_private_folder
from scalelab.hub_ext.labs.handin import FEEDBACK, HandInError, check_lab_name, check_notebook


def feedback_path(lab: str, user: str) -> str:
    """Where ``user``'s feedback on ``lab`` lies, from the store's root."""
    return f"{FEEDBACK}/{lab}/{user}/{lab}.ipynb"


def keep_feedback(store: Any, lab: str, user: str, content: bytes, max_bytes: int) -> None:
    """Check ``content`` as a notebook and keep it as ``user``'s feedback on ``lab``.

    Raises
    ------
    HandInError
        Not a notebook, or over ``max_bytes``.
    """
    check_notebook(content, max_bytes)
    make_private_folder(store, FEEDBACK)
    path = feedback_path(lab, user)
    store.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    store.pipe_file(path, content)


def read_feedback(store: Any, lab: str, user: str) -> bytes:
    """``user``'s feedback on ``lab``. Raises ``FileNotFoundError`` while there is none."""
    return store.cat_file(feedback_path(lab, user))


class FeedbackHandler(StoreAPIHandler):
    """Return and fetch feedback (see the module docstring)."""

    refused = "Feedback not returned"

    def _lab(self, lab: str) -> str:
        try:
            return check_lab_name(lab)
        except HandInError as exc:
            raise web.HTTPError(400, str(exc)) from None

    @needs_scope("admin:users")
    async def put(self, user_name: str, lab: str) -> None:
        lab = self._lab(lab)
        store = await self._store(user_name)
        limit = int(self._settings().max_notebook_mib * 2**20)
        body = self.request.body
        await self._run("feedback", keep_feedback, store, lab, user_name, body, limit)
        self.log.info("ScaleLab: feedback on %s returned to %s", lab, user_name)
        self.set_status(201)

    @needs_scope("users:activity")
    async def get(self, user_name: str, lab: str) -> None:
        lab = self._lab(lab)
        store = await self._store(user_name)
        try:
            content = await self._run("feedback", read_feedback, store, lab, user_name)
        except FileNotFoundError:
            raise web.HTTPError(404, f"No feedback on {lab} for {user_name} yet") from None
        self.set_header("Content-Type", "application/x-ipynb+json")
        self.write(content)


def handlers() -> list[tuple[str, type]]:
    """Routes for ``c.JupyterHub.extra_handlers`` (mounted under ``/hub/``)."""
    return [(r"/api/scalelab/users/([^/]+)/feedback/([^/]+)", FeedbackHandler)]
