"""The contents manager of a server with the course store as the folder ``store`` of the home.

:class:`StoreMetaManager` (jupyter-fs' ``MetaManager``) sends every contents API call for
``store/<path>`` to the store's drive and back, and answers the store's refusals with 403, a
full disk with 507, a missing file with 404 and an unreachable store with 503.
Why: docs/design-notes.md, scalelab.hub_ext.server.store_contents.
"""

from __future__ import annotations

import inspect
from base64 import b64decode
from collections.abc import Callable
from typing import Any

from jupyterfs.metamanager import MetaManager
from tornado.web import HTTPError

from scalelab.common.diskspace import disk_full_error, full_disk_message
from scalelab.common.exc_chain import first_in_chain
from scalelab.hub_ext.server.store_folder import (
    DEFAULT_FOLDER,
    api_model,
    check_folder_name,
    crossing_message,
    drive_path,
    store_part,
    with_entry,
)
from scalelab.store.access.guard import split_path
from scalelab.store.access.student import PROTOCOL
from scalelab.store.errors import StoreAccessError, StoreUnavailableError

#: jupyter-fs' resource URL of the course store (``scalelab:///``, the student's view).
STORE_URL = f"{PROTOCOL}:///"


def _in_chain(exc: BaseException, kind: type[BaseException]) -> Any:
    """The first exception of type ``kind`` among ``exc`` and those it was raised from or while
    handling (``__cause__`` / ``__context__``); else None."""
    return first_in_chain(exc, kind)


def store_refusal(exc: BaseException) -> StoreAccessError | None:
    """The store's refusal behind ``exc``: ``exc`` itself, or the exception it was raised from
    or while handling (``__cause__`` / ``__context__``), as jupyter-fs wraps it; else None."""
    return _in_chain(exc, StoreAccessError)


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


def decode_chunk(model: dict[str, Any]) -> bytes:
    """The bytes of one chunk of a chunked upload (JupyterLab sends files over 1 MiB so):
    ``content`` in ``format`` ``"base64"`` or ``"text"``.

    Raises HTTPError 400 for a model that is not a file with content in one of those formats.
    """
    if model.get("type") != "file" or not isinstance(model.get("content"), str):
        raise HTTPError(400, "A chunked upload sends a file's content, type 'file'.")
    if model.get("format") == "base64":
        return b64decode(model["content"].encode("ascii"))
    if model.get("format") == "text":
        return model["content"].encode("utf-8")
    raise HTTPError(400, "Must specify format of file contents as 'text' or 'base64'")


class StoreMetaManager(MetaManager):
    """jupyter-fs' ``MetaManager`` with the course store as the folder ``folder_name`` of the
    home; the store's refusals are HTTP 403, a full disk or quota HTTP 507."""

    #: Whether the home was last seen holding its own ``folder_name`` (logged when it changes).
    _shadowed_seen = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The store's folder at the home's root: ``c.StoreDrive.folder_name`` (which
        #: :class:`~scalelab.hub_ext.server.store_drive.StoreDrive` checks), else ``store``.
        self.folder_name = check_folder_name(
            self.config.StoreDrive.get("folder_name", DEFAULT_FOLDER)
        )

    # -- where a path goes -------------------------------------------------------------------

    def _drive(self) -> str | None:
        """The store drive's id, None when jupyter-fs has no working manager for it."""
        for resource in self.resources:
            drive = resource.get("drive")
            if resource.get("url") == STORE_URL and resource.get("init") and drive:
                if drive in self._managers:
                    return drive
        return None

    def _shadowed(self) -> bool:
        """Whether the home holds a real file or folder named ``folder_name`` (it wins); a
        warning is logged when that starts, a line when it ends."""
        real = bool(self.root_manager.exists(self.folder_name))  # jupyter-fs' root is synchronous
        if real != self._shadowed_seen:
            self._shadowed_seen = real
            if real:
                self.log.warning(
                    "ScaleLab: the home holds its own %r, which is shown as it is: the course "
                    "store is not shown in the file browser while it is there. Rename it, or "
                    "set c.StoreDrive.folder_name to another name.",
                    self.folder_name,
                )
            else:
                name = self.folder_name
                self.log.info("ScaleLab: the course store is the folder %r again.", name)
        return real

    def _route(self, path: str) -> tuple[str, str | None]:
        """``path`` as jupyter-fs takes it, and its part below ``folder_name`` (None when the
        path is not in the store folder: the home's, or jupyter-fs' own drive path)."""
        drive = self._drive()
        part = None if drive is None else store_part(path, self.folder_name)
        if drive is None or part is None or self._shadowed():
            return path, None
        return drive_path(part, drive), part

    def _writable(self) -> Callable[[str], bool] | None:
        """Whether the student may write a store path (the drive's view says), if it has one."""
        drive = self._drive()
        view = getattr(getattr(self._managers.get(drive), "_fs", None), "view", None)
        if view is None:
            return None

        def writable(store_path: str) -> bool:
            try:
                return view.writable(split_path(store_path))
            except StoreAccessError:
                return False

        return writable

    def _model(self, model: dict[str, Any]) -> dict[str, Any]:
        return api_model(model, self.folder_name, self._writable())

    def _folder_refusal(self, action: str) -> HTTPError:
        return HTTPError(
            403,
            f"{action} {self.folder_name!r} is not allowed: it is where your home shows the "
            "course store; the files in it can be changed under "
            f"{self.folder_name}/home/<you>/.",
        )

    # -- calls to jupyter-fs, errors answered ------------------------------------------------

    async def _call(self, action: str, target: str, shown: str | None, fn: Callable[[], Any]):
        """``fn()`` (awaited if it returns an awaitable) for ``action`` on jupyter-fs' path
        ``target``; ``shown`` is the API path when it is in the store folder, else None."""
        try:
            result = fn()
            while inspect.isawaitable(result):  # a drive or home served by an async manager
                result = await result
            return result
        except Exception as exc:
            answer = self._answer(action, target, shown, exc)
            if answer is None:
                raise
            raise answer from None

    def _answer(
        self, action: str, target: str, shown: str | None, exc: Exception
    ) -> HTTPError | None:
        refusal = store_refusal(exc)
        if refusal is not None:
            self.log.info("The course store refused %s of %r: %s", action, target, refusal)
            return forbidden(refusal)
        full = disk_full_error(exc)
        if full is not None:
            answer = disk_full_answer(action, target, full, self.root_dir)
            self.log.warning("%s", answer.log_message)
            return answer
        if shown is None:
            return None
        unavailable = _in_chain(exc, StoreUnavailableError)
        if unavailable is not None:
            return HTTPError(503, str(unavailable))
        if _in_chain(exc, FileNotFoundError) is not None:
            return HTTPError(404, f"No such file or directory: {shown}")
        return None

    async def _dispatch(self, name: str, path: str, *args: Any, **kwargs: Any) -> Any:
        """jupyter-fs' ``name`` on ``path`` (first argument), mapped to the store drive when the
        path is in the store folder; errors answered."""
        target, part = self._route(path)
        shown = None if part is None else path.strip("/")
        method = getattr(MetaManager, name)
        return await self._call(name, target, shown, lambda: method(self, target, *args, **kwargs))

    # -- the contents API --------------------------------------------------------------------

    async def get(
        self,
        path: str,
        content: bool = True,
        type: str | None = None,
        format: str | None = None,
        require_hash: bool = False,
    ) -> dict[str, Any]:
        """A model of ``path``; the home's top folder lists ``store`` (unless it holds its own)."""
        target, part = self._route(path)
        options: dict[str, Any] = {"content": content, "type": type, "format": format}
        if require_hash:  # jupyter-fs' drive does not take it; the handler then asks without
            options["require_hash"] = require_hash
        shown = None if part is None else path.strip("/")
        model = await self._call(
            "get", target, shown, lambda: MetaManager.get(self, target, **options)
        )
        if part is not None:
            return self._model(model)
        if content and not path.strip("/") and model.get("type") == "directory":
            entry = await self._folder_entry()
            if entry is not None:
                return with_entry(model, entry)
        return model

    async def _folder_entry(self) -> dict[str, Any] | None:
        """The store folder's model for the home's listing, None when it is not shown. Its times
        are the store root's; a store that cannot be reached still shows (opening it says why)."""
        drive = self._drive()
        if drive is None or self._shadowed():
            return None
        try:
            root = await self._call(
                "get", drive_path("", drive), self.folder_name,
                lambda: MetaManager.get(self, drive_path("", drive), content=False),
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 -- the home's listing must not fail for it
            self.log.warning("ScaleLab: the course store's folder: %s", exc)
            root = {"path": "", "type": "directory", "last_modified": None, "created": None}
        entry = {
            "content": None, "format": None, "mimetype": None, "size": None, "writable": False,
            "type": "directory", "path": "",
            **{k: root.get(k) for k in ("last_modified", "created")},
        }  # fmt: skip
        return api_model(entry, self.folder_name)

    async def save(self, model: dict[str, Any], path: str = "") -> dict[str, Any]:
        """Save ``model`` at ``path``; in the store, chunk 1 of a chunked upload is written
        whole and each later chunk appended, as jupyter_server's ``LargeFileManager`` does."""
        target, part = self._route(path)
        chunk = model.get("chunk") if part is not None else None
        if part is not None and chunk not in (None, 1):
            data = decode_chunk(model)
            await self._call("save", target, path.strip("/"), lambda: self._append(part, data))
            return await self.get(path, content=False)
        saved = await self._call(
            "save", target, None if part is None else path.strip("/"),
            lambda: MetaManager.save(self, model, target),
        )  # fmt: skip
        return saved if part is None else self._model(saved)

    def _append(self, part: str, data: bytes) -> None:
        """Append ``data`` to the store file ``part`` (a later chunk of an upload)."""
        manager = self._managers[self._drive()]
        with manager._fs.open(manager._normalize_path(part), "ab") as f:
            f.write(data)

    async def delete(self, path: str) -> None:
        """Delete ``path``; ``store`` itself is refused (403)."""
        if self._route(path)[1] == "":
            raise self._folder_refusal("deleting")
        await self._dispatch("delete", path)

    async def rename(self, old_path: str, new_path: str) -> None:
        """Rename within the home or within the store; a move between them is refused (400,
        saying to copy instead), and so is renaming ``store`` itself (403)."""
        old, old_part = self._route(old_path)
        new, new_part = self._route(new_path)
        if old_part == "":
            raise self._folder_refusal("renaming")
        if (old_part is None) != (new_part is None):
            raise HTTPError(400, crossing_message(old_path, new_path, self.folder_name))
        shown = None if old_part is None else old_path.strip("/")
        await self._call("rename", old, shown, lambda: MetaManager.rename(self, old, new))

    async def exists(self, path: str) -> bool:
        """Whether ``path`` is a file or folder (in the store: one the student may read)."""
        return await self._dispatch("exists", path)

    async def dir_exists(self, path: str) -> bool:
        """Whether ``path`` is a folder (``store`` is)."""
        return await self._dispatch("dir_exists", path)

    async def file_exists(self, path: str = "") -> bool:
        """Whether ``path`` is a file."""
        target, part = self._route(path)
        shown = None if part is None else path.strip("/")
        return await self._call(
            "file_exists", target, shown, lambda: MetaManager.file_exists(self, path=target)
        )

    async def is_hidden(self, path: str) -> bool:
        """Whether ``path`` is hidden (a part starting with ``.``)."""
        return await self._dispatch("is_hidden", path)

    def get_kernel_path(self, path: str, model: Any = None) -> str:
        """Where a kernel for the notebook ``path`` starts: a notebook in the store gets the
        home's top folder (``""``), the store having no folder on this server's disk."""
        target, part = self._route(path)
        if part is not None:
            return ""
        return MetaManager.get_kernel_path(self, target, model=model)

    async def create_checkpoint(self, path: str) -> dict[str, Any]:
        """A checkpoint of ``path`` (jupyter-fs' drive keeps none: a placeholder)."""
        return await self._dispatch("create_checkpoint", path)

    async def list_checkpoints(self, path: str) -> list[dict[str, Any]]:
        """The checkpoints of ``path``."""
        return await self._dispatch("list_checkpoints", path)

    async def restore_checkpoint(self, checkpoint_id: str, path: str) -> None:
        """Restore ``path`` from a checkpoint."""
        await self._checkpoint_call("restore_checkpoint", checkpoint_id, path)

    async def delete_checkpoint(self, checkpoint_id: str, path: str) -> None:
        """Delete a checkpoint of ``path``."""
        await self._checkpoint_call("delete_checkpoint", checkpoint_id, path)

    async def _checkpoint_call(self, action: str, checkpoint_id: str, path: str) -> None:
        """MetaManager's ``action`` (``restore_checkpoint``, ``delete_checkpoint``) on a
        checkpoint of ``path``, through :meth:`_call`'s refusals."""
        target, part = self._route(path)
        shown = None if part is None else path.strip("/")
        method = getattr(MetaManager, action)
        await self._call(action, target, shown, lambda: method(self, checkpoint_id, target))
