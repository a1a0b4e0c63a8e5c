"""The hub's hand-in API: students send a lab, the hub keeps it in the course store.

``POST /hub/api/scalelab/users/<user>/submissions/<lab>`` (body: the notebook, ``.ipynb`` JSON)
answers 201 with the version's receipt; ``GET`` on the same path lists the user's versions of
the lab (oldest first), ``GET /hub/api/scalelab/users/<user>/submissions`` those of every lab.
Both need scope ``users:activity`` on that user, which the user's server's token holds (as for
the servers' GPU reports), so a student hands in and reads only their own.

The hub alone writes ``submissions/`` in the store (with its own storage options; on a local
store or HDFS the folder is mode 0700, the hub's), so a version cannot be changed or removed by
a student, nor read by another. Layout and receipts: :mod:`scalelab.hub_ext.labs.handin`.
Why: docs/design-notes.md, scalelab.hub_ext.hub.submissions.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

from fsspec.implementations.local import LocalFileSystem
from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from scalelab import envvars
from scalelab.hub_ext.labs.handin import (
    RECEIPT,
    SUBMISSIONS,
    HandIn,
    HandInError,
    HandInLimitError,
    check_lab_name,
    check_notebook,
    check_room,
    chosen_version,
    is_stamp,
    make_receipt,
    parse_deadline,
    user_folder,
)

#: One hand-in at a time per (user, lab), so version numbers do not collide.
_LOCKS: dict[tuple[str, str], asyncio.Lock] = {}


def make_private_folder(store: Any, path: str) -> None:
    """Make ``path`` (from the store's root) with its parents; a folder made here gets mode
    0700 where the store has modes (a local folder, HDFS through hdfs-native or WebHDFS): only
    the hub's own user reaches it. On an object store (S3) the students' credentials must not
    reach the prefix (the operators' guide says so).

    Raises
    ------
    OSError, PermissionError, RuntimeError
        What the store's client raises (refused, unreachable).
    """
    if store.exists(path):
        return
    store.makedirs(path, exist_ok=True)
    inner, full = store.fs, store._join(path)
    client = getattr(inner, "client", None)
    if isinstance(inner, LocalFileSystem):
        os.chmod(full, 0o700)
    elif client is not None and hasattr(client, "set_permission"):  # hdfs-native
        client.set_permission(full, 0o700)
    elif hasattr(inner, "chmod") and getattr(inner, "protocol", None) in ("webhdfs", "swebhdfs"):
        inner.chmod(full, "700")


def known_labs(settings: HandIn, labs_dir: str | None) -> set[str]:
    """The labs a student may hand in: the released labs the servers get (``labs_dir``, the
    spawner's ``SCALELAB_LABS_DIR``; else the hub's own, else the package's), and every lab
    with a deadline."""
    from scalelab.hub_ext.labs.sync import bundled_labs

    try:
        released = {name.removesuffix(".ipynb") for name in bundled_labs(labs_dir)}
    except OSError:
        released = set()
    return released | set(settings.deadlines)


def hand_in(
    store: Any, lab: str, user: str, content: bytes, settings: HandIn, now: datetime
) -> dict:
    """Keep ``content`` as ``user``'s new version of ``lab`` in ``store`` (a
    :class:`~scalelab.store.access.fs.StoreFileSystem` with the hub's rights), receipt last.

    Returns
    -------
    dict
        The receipt (:class:`~scalelab.hub_ext.labs.handin.Receipt`).

    Raises
    ------
    HandInError
        The notebook is refused (:func:`~scalelab.hub_ext.labs.handin.check_notebook`), or
        :class:`~scalelab.hub_ext.labs.handin.HandInLimitError`: ``max_versions`` reached.
    """
    cells = check_notebook(content, int(settings.max_notebook_mib * 2**20))
    make_private_folder(store, SUBMISSIONS)
    folder = user_folder(lab, user)
    earlier = _stamps(store, folder)
    check_room(lab, earlier, settings.max_versions)
    receipt = make_receipt(lab, user, content, cells, now, earlier, settings.deadlines)
    version = f"{folder}/{receipt.stamp}"
    store.makedirs(version, exist_ok=True)
    store.pipe_file(receipt.path, content)
    store.pipe_file(f"{version}/{RECEIPT}", json.dumps(receipt.as_dict(), indent=1).encode())
    return receipt.as_dict()


def _names(store: Any, folder: str) -> list[str]:
    """The names of what ``folder`` holds in ``store``, in name order (none: it is missing)."""
    if not store.exists(folder):
        return []
    return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in store.ls(folder, detail=False))


def _stamps(store: Any, folder: str) -> list[str]:
    return [name for name in _names(store, folder) if is_stamp(name)]


def receipts(store: Any, user: str, labs: Collection[str] | None = None) -> list[dict]:
    """``user``'s receipts, oldest first per lab, labs in name order: of ``labs`` (None: every
    lab in the store). A version folder without its receipt (a hand-in cut short) is left out.
    """
    if labs is None:
        labs = labs_in(store)
    found = []
    for lab in labs:
        folder = user_folder(lab, user)
        for name in _stamps(store, folder):
            try:
                found.append(json.loads(store.cat_file(f"{folder}/{name}/{RECEIPT}")))
            except FileNotFoundError:
                continue
    return found


def collection(store: Any, lab: str, before: datetime | None) -> list[dict]:
    """Every student's version of ``lab`` to collect (see
    :func:`~scalelab.hub_ext.labs.handin.chosen_version`), students in name order: ``{"user",
    "receipt" (None: none at or before ``before``), "after" (versions after it), "versions"
    (all of them)}``."""
    rows = []
    for user in _names(store, f"{SUBMISSIONS}/{lab}"):
        found = receipts(store, user, [lab])
        chosen, after = chosen_version(found, before)
        rows.append({"user": user, "receipt": chosen, "after": after, "versions": len(found)})
    return rows


def labs_in(store: Any) -> list[str]:
    """The labs that have hand-ins in ``store``, in name order."""
    return _names(store, SUBMISSIONS)


def version_bytes(store: Any, lab: str, user: str, version: str) -> bytes:
    """The notebook of ``user``'s version ``version`` (its stamp) of ``lab``, as handed in.

    Raises
    ------
    FileNotFoundError
        No such version (or one cut short: no receipt).
    """
    folder = f"{user_folder(lab, user)}/{version}"
    if not is_stamp(version) or not store.exists(f"{folder}/{RECEIPT}"):
        raise FileNotFoundError(f"{user} has no version {version} of {lab}")
    return store.cat_file(f"{folder}/{lab}.ipynb")


class StoreAccess:
    """What the hand-in, collection, feedback and instructors' handlers share (a mixin of
    JupyterHub handlers): the course store with the hub's own options, ``c.HandIn``, and the
    store's calls in a thread with their errors as HTTP statuses."""

    #: How a refusal of the work starts (each handler names its own).
    refused = "Not handed in"

    def _spawner(self, user_name: str) -> Any:
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No such user: {user_name}")
        return user.spawner

    async def _store(self, user_name: str) -> Any:
        """The course store, from ``user_name``'s spawner's settings (opened in a thread)."""
        return await asyncio.to_thread(self._open, self._spawner(user_name))

    @staticmethod
    def _open(spawner: Any) -> Any:
        """The course store with the hub's own options, from ``spawner``'s settings."""
        url = getattr(spawner, "store_url", "")
        if not url:
            raise web.HTTPError(
                409, "This hub has no course store (c.ScaleLabSpawner.store_url): no hand-in"
            )
        from scalelab.store.access.fs import open_store
        from scalelab.store.errors import StoreConfigError

        try:
            return open_store(url, dict(getattr(spawner, "store_options", {}) or {}))
        except StoreConfigError as exc:
            raise web.HTTPError(409, f"The course store cannot be opened: {exc}") from None

    async def _course_store(self) -> Any:
        """The course store from the course's own settings: a spawner object made for no user
        reads them (never started), as the GPU pool does at the hub's start."""
        spawner_class = self.settings.get("spawner_class")
        probe = spawner_class(config=self.config) if spawner_class else None
        return await asyncio.to_thread(self._open, probe)

    def _settings(self) -> HandIn:
        return HandIn(config=self.config)

    async def _run(self, what: str, work: Any, *args: Any) -> Any:
        """``work(*args)`` in a thread. A refusal is a 400 (409 for the bound on versions),
        the store's failure a 503; ``FileNotFoundError`` is the caller's (a 404)."""
        try:
            return await asyncio.to_thread(work, *args)
        except HandInError as exc:
            status = 409 if isinstance(exc, HandInLimitError) else 400
            raise web.HTTPError(status, f"{self.refused}: {exc}") from None
        except FileNotFoundError:
            raise
        except (OSError, RuntimeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            self.log.error("ScaleLab %s failed in the course store: %s", what, first)
            raise web.HTTPError(
                503,
                f"The course store did not take the {what} ({first}); nothing was lost: try "
                "again in a minute, and tell the course's operators if it lasts",
            ) from None


class StoreAPIHandler(StoreAccess, APIHandler):
    """A JupyterHub API handler with :class:`StoreAccess`."""


class SubmissionsHandler(StoreAPIHandler):
    """Hand-in, the list of versions and a version's notebook (see the module docstring)."""

    @needs_scope("users:activity")
    async def post(self, user_name: str, lab: str | None = None) -> None:
        if lab is None:
            raise web.HTTPError(405, "Hand in to /submissions/<lab>")
        settings = self._settings()
        try:
            lab = check_lab_name(lab)
        except HandInError as exc:
            raise web.HTTPError(400, f"Not handed in: {exc}") from None
        spawner = self._spawner(user_name)
        labs_dir = (getattr(spawner, "environment", None) or {}).get(envvars.LABS_DIR)
        known = known_labs(settings, labs_dir if isinstance(labs_dir, str) else None)
        if lab not in known:
            raise web.HTTPError(
                404,
                f"Not handed in: the course has no lab {lab!r}; its labs are "
                f"{', '.join(sorted(known)) or 'none yet'}",
            )
        store = await self._store(user_name)
        lock = _LOCKS.setdefault((user_name, lab), asyncio.Lock())
        async with lock:
            receipt = await self._run(
                "hand-in",
                hand_in,
                store,
                lab,
                user_name,
                self.request.body,
                settings,
                datetime.now(UTC),
            )
        self.log.info(
            "ScaleLab: %s handed in %s, version %d%s",
            user_name,
            lab,
            receipt["version"],
            " (late)" if receipt["late"] else "",
        )
        self.set_status(201)
        self.write(json.dumps(receipt))

    @needs_scope("users:activity")
    async def get(self, user_name: str, lab: str | None = None, version: str | None = None) -> None:
        if version is not None:
            await self._version(user_name, lab or "", version)
            return
        labs = None
        if lab is not None:
            try:
                labs = [check_lab_name(lab)]
            except HandInError as exc:
                raise web.HTTPError(400, str(exc)) from None
        store = await self._store(user_name)
        found = await self._run("listing", receipts, store, user_name, labs)
        self.write(json.dumps({"submissions": found}))

    async def _version(self, user_name: str, lab: str, version: str) -> None:
        try:
            lab = check_lab_name(lab)
        except HandInError as exc:
            raise web.HTTPError(400, str(exc)) from None
        store = await self._store(user_name)
        try:
            content = await self._run("download", version_bytes, store, lab, user_name, version)
        except FileNotFoundError as exc:
            raise web.HTTPError(404, str(exc)) from None
        self.set_header("Content-Type", "application/x-ipynb+json")
        self.write(content)


class CollectionHandler(StoreAPIHandler):
    """``GET /hub/api/scalelab/submissions/<lab>[?before=<ISO 8601>]`` (scope
    ``admin:users``: the course's instructors, who are the hub's admins): each student's version
    to collect, ``{"lab", "deadline", "before", "students": [{"user", "receipt", "after"}]}``.
    ``before=deadline`` takes the lab's deadline."""

    @needs_scope("admin:users")
    async def get(self, lab: str) -> None:
        settings = self._settings()
        try:
            lab = check_lab_name(lab)
        except HandInError as exc:
            raise web.HTTPError(400, str(exc)) from None
        deadline = settings.deadlines.get(lab)
        text = self.get_argument("before", "")
        if text == "deadline" and not deadline:
            raise web.HTTPError(400, f"{lab} has no deadline (c.HandIn.deadlines)")
        try:
            before = parse_deadline(deadline if text == "deadline" else text) if text else None
        except HandInError as exc:
            raise web.HTTPError(400, f"before: {exc}") from None
        store = await self._course_store()
        rows = await self._run("collection", collection, store, lab, before)
        self.write(
            json.dumps(
                {
                    "lab": lab,
                    "deadline": deadline,
                    "before": before.astimezone(UTC).isoformat() if before else None,
                    "students": rows,
                }
            )
        )


def handlers() -> list[tuple[str, type]]:
    """Routes for ``c.JupyterHub.extra_handlers`` (mounted under ``/hub/``)."""
    return [
        (r"/api/scalelab/users/([^/]+)/submissions", SubmissionsHandler),
        (r"/api/scalelab/users/([^/]+)/submissions/([^/]+)", SubmissionsHandler),
        (r"/api/scalelab/users/([^/]+)/submissions/([^/]+)/([^/]+)", SubmissionsHandler),
        (r"/api/scalelab/submissions/([^/]+)", CollectionHandler),
    ]
