"""The instructors' view of the hand-ins: ``GET /hub/scalelab/submissions[?lab=<lab>]`` (scope
``admin:users``, a page) shows, for one lab, every student of the hub: how many versions, the
latest one's time and whether it was late, or that nothing was handed in; ``?format=csv`` gives
the same table as CSV. Grades are ``scalelab autograde``'s ``grades.csv`` (not kept by the hub).
Why: docs/design-notes.md, scalelab.hub_ext.labs.handin.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence

from jupyterhub import orm
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from scalelab.hub_ext.hub.submissions import StoreAccess, collection, labs_in
from scalelab.hub_ext.labs.handin import HandInError, check_lab_name

#: The columns of the page's table and CSV, one row per student.
COLUMNS = ("user", "versions", "latest", "submitted_at", "late")


def view_rows(students: Iterable[str], handed: Sequence[Mapping]) -> list[dict]:
    """One row per student (pure), in name order: every student of the hub, and anyone else
    who handed in (a user since removed); ``versions`` 0 for one who handed in nothing."""
    by_user = {row["user"]: row for row in handed}
    rows = []
    for user in sorted(set(students) | set(by_user)):
        row = by_user.get(user)
        receipt = row["receipt"] if row else None
        rows.append(
            {
                "user": user,
                "versions": row["versions"] if row else 0,
                "latest": receipt["version"] if receipt else None,
                "submitted_at": receipt["submitted_at"] if receipt else None,
                "late": receipt["late"] if receipt else None,
            }
        )
    return rows


def rows_csv(rows: Sequence[Mapping]) -> str:
    """The rows as CSV text with a header (:data:`COLUMNS`; empty cells for nothing)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow(["" if row[c] is None else row[c] for c in COLUMNS])
    return out.getvalue()


class SubmissionsPageHandler(StoreAccess, BaseHandler):
    """The page (see the module docstring)."""

    @web.authenticated
    @needs_scope("admin:users")
    async def get(self) -> None:
        settings = self._settings()
        store = await self._course_store()
        found = await self._run("listing", labs_in, store)
        labs = sorted(set(found) | set(settings.deadlines))
        lab = self.get_argument("lab", labs[0] if labs else "")
        if lab:
            try:
                lab = check_lab_name(lab)
            except HandInError as exc:
                raise web.HTTPError(400, str(exc)) from None
        handed = await self._run("listing", collection, store, lab, None) if lab else []
        students = [u.name for u in self.db.query(orm.User) if not u.admin]
        rows = view_rows(students, handed)
        if self.get_argument("format", "") == "csv":
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.set_header("Content-Disposition", f'attachment; filename="{lab}-handins.csv"')
            self.finish(rows_csv(rows))
            return
        page = await self.render_template(
            "submissions.html",
            labs=labs,
            lab=lab,
            deadline=settings.deadlines.get(lab),
            rows=rows,
        )
        self.finish(page)


def handlers() -> list[tuple[str, type]]:
    """Routes for ``c.JupyterHub.extra_handlers`` (mounted under ``/hub/``)."""
    return [(r"/scalelab/submissions", SubmissionsPageHandler)]
