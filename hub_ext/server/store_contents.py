"""The contents manager of a server with the course store drive: jupyter-fs' ``MetaManager``,
with the store's refusals answered as HTTP 403.

The drive's file system (:class:`scalelab.store.StudentStore`) refuses a path outside the
student's part of the store with :class:`~scalelab.store.errors.StoreAccessError` (a
``PermissionError``) before any I/O. jupyter-fs 1.2's ``FSSpecManager`` does not tell such a
refusal from a failure: ``save`` turns it into HTTP 500 ("Unexpected error while saving file"),
``rename`` into 500, ``get`` into 400, and ``delete`` lets it through as an unhandled 500.
:class:`StoreMetaManager` sits above those (it is the server's contents manager, jupyter-fs'
dispatcher to the home and the drives) and answers each of them as ``HTTPError(403, message)``,
the message being the guard's, which names the path and the rule, e.g. ``writing
'datasets/songs/part-0.csv' is not allowed: datasets/ is read-only; write to home/alice/...
instead.`` A full disk or quota (ENOSPC, EDQUOT) met while writing, in the home or the drive,
is ``HTTPError(507, message)`` naming the path, the disk and what to do
(:func:`~scalelab.common.diskspace.full_disk_message`), where jupyter_server and jupyter-fs
answer 500 "Unexpected error while saving file". Every other error passes unchanged.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from jupyterfs.metamanager import MetaManager
from tornado.web import HTTPError

from scalelab.common.diskspace import disk_full_error, full_disk_message
from scalelab.store.errors import StoreAccessError


def store_refusal(exc: BaseException) -> StoreAccessError | None:
    """The store's refusal behind ``exc``: ``exc`` itself, or the exception it was raised from
    or while handling (``__cause__`` / ``__context__``), as jupyter-fs wraps it; else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, StoreAccessError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def forbidden(refusal: StoreAccessError) -> HTTPError:
    """``refusal`` as the contents API's answer: 403 with the guard's message."""
    return HTTPError(403, str(refusal))


def disk_full_answer(action: str, path: str, full: BaseException, home: str) -> HTTPError:
    """A full disk met by ``action`` (``"save"``, ``"rename"``...) of ``path``: HTTP 507.

    The disk named is that of the file being written (``full.filename``, an ``OSError``'s),
    else that of ``home`` (the server's root folder). The message reads ``"<path> was not
    saved: The disk holding ... is full ..."`` for a save, ``"<action> of <path> failed: ..."``
    otherwise; a path of jupyter-fs' drive (``<drive>:<path>``) reads ``"<path> in the course
    store"``.
    """
    where = getattr(full, "filename", None) or home
    shown = path.lstrip("/")
    drive, colon, rest = shown.partition(":")
    if colon and "/" not in drive:  # jupyter-fs' "<drive>:<path>": the course store drive's
        shown = f"{rest} in the course store"
    what = f"{shown} was not saved" if action == "save" else f"{action} of {shown} failed"
    return HTTPError(507, f"{what}: {full_disk_message(where)}")


def _answering_refusals(name: str) -> Callable[..., Any]:
    dispatch = getattr(MetaManager, name)

    async def method(self: StoreMetaManager, *args: Any, **kwargs: Any) -> Any:
        try:
            result = await dispatch(self, *args, **kwargs)
            if inspect.isawaitable(result):  # a drive or home served by an async manager
                result = await result
            return result
        except Exception as exc:
            refusal = store_refusal(exc)
            full = disk_full_error(exc) if refusal is None else None
            if full is not None:
                path = args[1] if name == "save" and len(args) > 1 else (args[0] if args else "")
                answer = disk_full_answer(name, str(path), full, self.root_dir)
                self.log.warning("%s", answer.log_message)
                raise answer from None
            if refusal is None:
                raise
            self.log.info("The course store refused %s%r: %s", name, args[:2], refusal)
            raise forbidden(refusal) from None

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (
        f"jupyter-fs' ``{name}``; the course store's refusals are HTTP 403, a full disk 507."
    )
    return method


class StoreMetaManager(MetaManager):
    """jupyter-fs' ``MetaManager`` whose answers to the course store's refusals are HTTP 403,
    and to a full disk or quota HTTP 507."""

    get = _answering_refusals("get")
    save = _answering_refusals("save")
    delete = _answering_refusals("delete")
    rename = _answering_refusals("rename")
    exists = _answering_refusals("exists")
    dir_exists = _answering_refusals("dir_exists")
    file_exists = _answering_refusals("file_exists")
