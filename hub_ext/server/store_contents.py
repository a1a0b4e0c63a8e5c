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
instead.`` Every other error passes unchanged.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from jupyterfs.metamanager import MetaManager
from tornado.web import HTTPError

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
            if refusal is None:
                raise
            self.log.info("The course store refused %s%r: %s", name, args[:2], refusal)
            raise forbidden(refusal) from None

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"jupyter-fs' ``{name}``; the course store's refusals are HTTP 403."
    return method


class StoreMetaManager(MetaManager):
    """jupyter-fs' ``MetaManager`` whose answers to the course store's refusals are HTTP 403."""

    get = _answering_refusals("get")
    save = _answering_refusals("save")
    delete = _answering_refusals("delete")
    rename = _answering_refusals("rename")
    exists = _answering_refusals("exists")
    dir_exists = _answering_refusals("dir_exists")
    file_exists = _answering_refusals("file_exists")
