"""A student's view of the course store: an fsspec file system limited to their home and datasets.

:class:`StudentStore` (``student_store()``, the drive ``scalelab:///``): ``home/<user>/``
read-write, ``datasets/`` read-only, walks checked by :mod:`~scalelab.store.access.walkguard`,
local writes atomic, an unreachable store a :class:`~scalelab.store.errors.StoreUnavailableError`.
Why: docs/design-notes.md, scalelab.store.access.student.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import socket
import weakref
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import fsspec
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.spec import AbstractBufferedFile

from scalelab.common.atomicfile import part_path, publish
from scalelab.common.diskspace import FULL_ERRNOS
from scalelab.store import protocols
from scalelab.store.access import fs as store_fs
from scalelab.store.access import walkguard
from scalelab.store.access.fs import open_target, store_settings
from scalelab.store.access.guard import StoreView
from scalelab.store.errors import StoreAccessError, StoreError, StoreUnavailableError

#: fsspec protocol of the student's view, registered by :func:`register_protocol`.
PROTOCOL = "scalelab"

_UNREACHABLE_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ENOTCONN,
    errno.ESTALE,
    errno.ETIMEDOUT,
    errno.EIO,
}
# Back ends' "cannot reach the server" exceptions, by class name (botocore, aiohttp, urllib3).
_UNREACHABLE_NAMES = {
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ConnectionClosedError",
    "ClientConnectorError",
    "ServerDisconnectedError",
    "NewConnectionError",
    "MaxRetryError",
}


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause) says the store's server cannot be reached (pure)."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, (ConnectionError, TimeoutError, socket.gaierror)):
            return True
        if isinstance(exc, OSError) and exc.errno in _UNREACHABLE_ERRNOS:
            return True
        if any(cls.__name__ in _UNREACHABLE_NAMES for cls in type(exc).__mro__):
            return True
        if isinstance(exc, OSError) and any(p in str(exc).lower() for p in _UNREACHABLE_TEXT):
            return True  # hdfs-native's errors are plain OSErrors with the OS message
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


_UNREACHABLE_TEXT = (
    "connection refused",
    "connection reset",
    "timed out",
    "no route to host",
    "network is unreachable",
    "name or service not known",
    "failed to lookup address",
)


# Which positional argument / keyword of each method is a store path, and how it is checked:
# READ and WRITE the path itself (DELETE and MOVE are writes, named so in a refusal); GLOB a
# pattern's fixed part (walkguard.fixed_part), for the calls that expand it through the view's
# listing.
READ, WRITE, DELETE, MOVE, GLOB = "read", "write", "delete", "move", "glob"
#: The action a refusal names, per kind of check.
_VERBS = {READ: "reading", WRITE: "writing", DELETE: "deleting", MOVE: "moving", GLOB: "reading"}
_METHODS: dict[str, tuple[tuple[int, str, str], ...]] = {
    **dict.fromkeys(
        "cat_file ukey checksum modified sign walk find du".split(),
        ((0, "path", READ),),
    ),
    **dict.fromkeys("glob expand_path cat".split(), ((0, "path", GLOB),)),
    **dict.fromkeys("sizes cat_ranges".split(), ((0, "paths", READ),)),
    "get": ((0, "rpath", GLOB),),
    **dict.fromkeys("rm_file rm delete rmdir".split(), ((0, "path", DELETE),)),
    "touch": ((0, "path", WRITE),),
    **dict.fromkeys("put_file put".split(), ((1, "rpath", WRITE),)),
    "cp_file": ((0, "path1", READ), (1, "path2", WRITE)),
    "copy": ((0, "path1", GLOB), (1, "path2", WRITE)),
    "mv": ((0, "path1", MOVE), (1, "path2", WRITE)),
}


class StudentStore(DirFileSystem):
    """fsspec file system of one student's part of the course store (``scalelab://``).

    Parameters
    ----------
    user
        The student; None reads ``JUPYTERHUB_USER``.
    store_url, store_options
        The store's URL and fsspec ``storage_options``; None reads ``SCALELAB_STORE_URL`` /
        ``SCALELAB_STORE_OPTIONS``. (Named so, not ``url``, because fsspec passes them through
        ``url_to_fs`` when a library opens a ``scalelab:///...`` URL.)

    Raises
    ------
    StoreConfigError
        No user, a bad store URL or options.
    StoreAccessError (a PermissionError)
        From any method given a path outside ``home/<user>`` and ``datasets/`` (or a link that
        leads outside them), or a write to ``datasets/``; from the asynchronous methods
        (``_cat_file``, ``open_async``, ...), which the view does not offer.
    StoreUnavailableError (a ConnectionError)
        From any method when the store cannot be reached.
    """

    protocol = PROTOCOL
    # Synchronous only: DirFileSystem's coroutines would reach the back end unchecked.
    async_impl = False
    mirror_sync_methods = False
    # Never from fsspec's instance cache: a "scalelab:///" URL opened for one user (read from
    # JUPYTERHUB_USER) must not be handed to another user in the same process.
    cachable = False

    def __init__(
        self,
        user: str | None = None,
        store_url: str | None = None,
        store_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ):
        url = store_url
        if url is None:
            url, env_options = store_settings()
            store_options = {**env_options, **(store_options or {})}
        user = os.environ.get("JUPYTERHUB_USER", "") if user is None else user
        view = StoreView(user)
        fs, root = open_target(url, store_options)
        super().__init__(path=root, fs=fs, **kwargs)
        self.view = view
        self.url = url
        #: The store's kind (:mod:`scalelab.store.protocols`): local links and atomic writes,
        #: folders or none, its errors.
        self.store_protocol = protocols.for_fs(fs)
        self._real_root = os.path.realpath(root) if self.local else ""
        if self.local:
            fs.makedirs(self._join(view.home), exist_ok=True)

    @property
    def local(self) -> bool:
        """Whether the store is a folder of this machine (links checked, writes atomic)."""
        return self.store_protocol.local

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        # "scalelab:///datasets/x/" -> "datasets/x" (trailing "/" dropped, as fsspec does); the
        # bare "scalelab:///" stays "/" (the root), since fsspec's URL chaining would replace an
        # empty path.
        if not isinstance(path, str):
            return path
        if path.startswith(f"{PROTOCOL}://"):
            path = path[len(PROTOCOL) + 3 :]
            path = path[1:] if path.startswith("/") and len(path) > 1 else path
        return path.rstrip("/") or path

    # -- checks ------------------------------------------------------------------------------

    def check(self, path: Any, write: bool = False, pattern: bool = False, verb: str = "") -> None:
        """Refuse ``path`` (a string, list or dict of them) outside the student's part.

        On a local store the real location (symlinks resolved) is checked too: to be read it must
        be inside the home or ``datasets/``, to be written inside the home. With ``pattern``, a
        glob is checked by its fixed part (``walkguard.fixed_part``); the listing that expands it
        shows only what may be read. ``verb`` names the action in a refusal (``"deleting"``);
        by default ``"writing"`` or ``"reading"``.

        Raises
        ------
        StoreAccessError
            The first path (or link target) outside what may be read (or, with ``write``,
            written); the message names it and the rule.
        """
        if isinstance(path, dict):
            path = list(path)
        for p in [path] if isinstance(path, str) else path:
            stripped = self._strip_protocol(p)
            fixed = walkguard.fixed_part(stripped) if pattern else stripped
            norm = self.view.check(fixed, write, verb)
            if self.local:
                target = self._real_path(norm)
                self.view.check_target(self._real_root, target, p, write=write, verb=verb)

    def _real_path(self, norm: str) -> str:
        """Where the normalised ``norm`` is on a local store's disk, symlinks resolved."""
        return os.path.realpath(os.path.join(self._real_root, norm))

    def _unavailable(self, exc: BaseException) -> StoreUnavailableError | None:
        gone = self.local and not os.path.isdir(self._real_root)
        if not gone and not is_unreachable(exc):
            return None
        message = self.store_protocol.unreachable_message(self.url, exc, os.environ)
        if message is not None:
            return StoreUnavailableError(message)
        what = "its folder is gone" if gone else f"{type(exc).__name__}: {_first_line(exc)}"
        return StoreUnavailableError(
            f"the course store {self.url} cannot be reached ({what}). "
            f"Check {self.store_protocol.setting_hint}. Files are written whole or not at all: "
            "nothing half-written was left."
        )

    def _failure(self, exc: BaseException) -> Exception | None:
        """``exc`` as the store's own error, or None to raise it as it is: a store that cannot be
        reached (:class:`StoreUnavailableError`; for HDFS naming the namenode's address), or what
        the protocol words itself (HDFS: a missing Kerberos ticket, a refusal by HDFS's
        permissions; :meth:`~scalelab.store.protocols.base.StoreProtocol.failure`)."""
        return self._unavailable(exc) or self.store_protocol.failure(self.url, exc)

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except StoreError:
            raise
        except Exception as exc:
            failure = self._failure(exc)
            if failure is not None:
                raise failure from exc
            raise

    # -- listings and files ------------------------------------------------------------------

    def ls(self, path: str = "", detail: bool = True, **kwargs: Any) -> list:
        """List ``path``: only what the student may read, and no link leaving the allowed roots.

        The store root and ``home`` are the view's own folders (``StoreView.children``): their
        listing is ``home`` and ``datasets``, and ``home/<user>``, without asking the store,
        which a per-student key may not list there. A root the store holds nothing in yet (a new
        home on S3, which has no folders) lists as empty. On a local store every walking call
        (find, glob, walk, du, expand_path, and get, copy, cat, put through them) sees the store
        through it (see ``walkguard``). Raises StoreAccessError for a ``path`` outside the
        student's part.
        """
        self.check(path)
        folder = self._view_folder(path)
        children = None if folder is None else self.view.children(folder)
        if children is not None:
            return [self._folder_info(c) for c in children] if detail else list(children)
        try:
            out = self._call(lambda: DirFileSystem.ls(self, path, detail=detail, **kwargs))
        except FileNotFoundError:
            if folder is None:
                raise
            return []
        name = (lambda e: e["name"]) if detail else (lambda e: e)
        shown = [e for e in out if self.view.visible(name(e)) and self._inside(name(e))]
        return [self._created_first(e) for e in shown] if detail else shown

    def _view_folder(self, path: Any) -> str | None:
        """``path`` normalised when it is one of the view's folders (the root, ``home``,
        ``home/<user>``, ``datasets``), else None. For a path already checked."""
        if not isinstance(path, str):
            return None
        norm = self.view.check(self._strip_protocol(path))
        return norm if self.view.is_folder(norm) else None

    def _folder_info(self, path: str) -> dict[str, Any]:
        """``info`` of one of the view's folders (normalised ``path``): a directory, even where
        the store has nothing. An object store is not asked; a local one is, for the folder's
        times and mode, when it is there (and not a link out)."""
        info: dict[str, Any] = {"name": path, "size": 0, "type": "directory"}
        if not (self.local and self._inside(path)):
            return info
        try:
            real = self._call(lambda: DirFileSystem.info(self, path))
        except FileNotFoundError:
            return info
        if real.get("type") != "directory":
            return info
        return self._created_first({**real, "name": path})

    def _inside(self, path: str) -> bool:
        """False for a listed entry that is a link leaving the allowed roots (left out)."""
        try:
            self.check(path)
        except StoreAccessError:
            return False
        return True

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        """fsspec's ``info``; the view's folders are directories without asking an object store.

        Raises StoreAccessError for a ``path`` outside the student's part.
        """
        self.check(path)
        folder = self._view_folder(path)
        if folder is not None:
            return self._folder_info(folder)
        return self._created_first(self._call(lambda: DirFileSystem.info(self, path, **kwargs)))

    def created(self, path: str) -> datetime:
        """When ``path`` was created (a timezone-aware datetime on a local store, UTC), never
        later than :meth:`modified`; another store's own ``created``.

        Raises StoreAccessError for a ``path`` outside the student's part.
        """
        self.check(path)
        if not self.local:
            return self._call(lambda: DirFileSystem.created(self, path))
        return datetime.fromtimestamp(self.info(path)["created"], tz=UTC)

    def _created_first(self, info: dict[str, Any]) -> dict[str, Any]:
        """``info`` whose ``created`` (seconds since the epoch) is not later than its ``mtime``.

        A local store's ``created`` is the change time, which the rename of an atomic write
        moves past ``mtime``: the birth time where the platform's ``stat`` has one, else the
        earlier of the two. An entry without both numbers is returned as it is.
        """
        created, mtime = info.get("created"), info.get("mtime")
        if not (isinstance(created, (int, float)) and isinstance(mtime, (int, float))):
            return info
        if self.local and _HAS_BIRTHTIME:
            with contextlib.suppress(OSError):
                created = os.stat(self._join(info["name"])).st_birthtime
        return {**info, "created": min(created, mtime)}

    def size(self, path: str) -> int | None:
        """fsspec's ``size``; for the view's folders their ``info``'s (0 on an object store)."""
        self.check(path)
        folder = self._view_folder(path)
        if folder is not None:
            return self._folder_info(folder)["size"]
        return self._call(lambda: DirFileSystem.size(self, path))

    def exists(self, path: str, **kwargs: Any) -> bool:
        """False for paths outside the student's part too, like ``os.path.exists``; True for the
        view's folders."""
        if not self._inside(path):
            return False
        if self._view_folder(path) is not None:
            return True
        return self._call(lambda: DirFileSystem.exists(self, path, **kwargs))

    def isdir(self, path: str) -> bool:
        """False for paths outside the student's part too; True for the view's folders."""
        if not self._inside(path):
            return False
        if self._view_folder(path) is not None:
            return True
        return self._call(lambda: DirFileSystem.isdir(self, path))

    def isfile(self, path: str) -> bool:
        """False for paths outside the student's part and for the view's folders."""
        if not self._inside(path) or self._view_folder(path) is not None:
            return False
        return self._call(lambda: DirFileSystem.isfile(self, path))

    def mkdir(self, path: str, *args: Any, **kwargs: Any) -> None:
        """Make a folder in the home. On a store without folders (S3) nothing is made (a folder
        is there once a file is in it), and s3fs, which would list the bucket's root to check
        that the bucket exists, is not asked: a per-student key may not list it.

        Raises StoreAccessError for a ``path`` outside the home.
        """
        self.check(path, write=True)
        if not self.store_protocol.folders:
            return None
        return self._call(lambda: DirFileSystem.mkdir(self, path, *args, **kwargs))

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """Make a folder and its parents in the home; nothing on S3, as :meth:`mkdir`.

        Raises StoreAccessError for a ``path`` outside the home.
        """
        self.check(path, write=True)
        if not self.store_protocol.folders:
            return None
        return self._call(lambda: DirFileSystem.makedirs(self, path, exist_ok=exist_ok))

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        write = any(c in mode for c in "wxa+")
        self.check(path, write=write)
        if write and self.local and "a" not in mode and "+" not in mode:
            return self._call(lambda: self._open_atomic(path, mode, **kwargs))
        inner = self._call(lambda: DirFileSystem.open(self, path, mode, **kwargs))
        return _StoreFile(inner, self._failure, write)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        if not self.local:
            self.check(path, write=True)
            return self._call(
                lambda: DirFileSystem.pipe_file(self, path, value, mode=mode, **kwargs)
            )
        with self.open(path, "xb" if mode == "create" else "wb") as f:
            f.write(value)
        return None

    def pipe(self, path: Any, value: bytes | None = None, **kwargs: Any) -> None:
        """Write ``value`` to ``path``, or each ``{path: value}`` of a dict; all paths are checked
        before any is written (StoreAccessError for one outside the home)."""
        items = list(path.items()) if isinstance(path, dict) else [(path, value)]
        self.check([p for p, _ in items], write=True)
        for p, v in items:
            self.pipe_file(p, v, **kwargs)

    def get_file(self, rpath: str, lpath: Any, **kwargs: Any) -> None:
        """Copy one file (or make one folder, for a recursive ``get``) to the local ``lpath``.

        Raises StoreAccessError for an ``rpath`` (or the link it is) outside the student's part.
        """
        self.check(rpath)
        if isinstance(lpath, (str, os.PathLike)) and self.isdir(rpath):
            os.makedirs(lpath, exist_ok=True)  # as fsspec's generic get_file; s3fs would fail
            return None
        return self._call(lambda: DirFileSystem.get_file(self, rpath, lpath, **kwargs))

    def write_text(self, path: str, value: str, encoding: str | None = None, **kwargs: Any) -> int:
        with self.open(path, "w", encoding=encoding, **kwargs) as f:
            return f.write(value)

    def _open_atomic(self, path: str, mode: str, **kwargs: Any) -> _StoreFile:
        # Through a link, the write goes to its target (checked here, as written, to be in the
        # home): renaming over the link itself would replace it with a file.
        norm = self.view.check(self._strip_protocol(path), write=True)
        target = self._real_path(norm)
        self.view.check_target(self._real_root, target, path, write=True)
        if "x" in mode and self.fs.exists(target):
            raise FileExistsError(f"{path!r} already exists in the course store")
        temp = str(part_path(target))
        inner = self.fs.open(temp, mode.replace("x", "w"), **kwargs)
        return _StoreFile(inner, self._failure, True, temp, target)


#: Whether ``os.stat`` gives a file's birth time here (macOS, the BSDs, Windows; not Linux).
_HAS_BIRTHTIME = hasattr(os.stat_result, "st_birthtime")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else "no message"


def _guarded(name: str, args_spec: tuple[tuple[int, str, str], ...]) -> Callable[..., Any]:
    base = walkguard.implementation(name)

    @functools.wraps(base)
    def method(self: StudentStore, *args: Any, **kwargs: Any) -> Any:
        for index, key, how in args_spec:
            value = args[index] if len(args) > index else kwargs.get(key)
            if value is not None:
                writes = how in (WRITE, DELETE, MOVE)
                self.check(value, write=writes, pattern=how == GLOB, verb=_VERBS[how])
        return self._call(lambda: base(self, *args, **kwargs))

    return method


for _name, _spec in _METHODS.items():
    setattr(StudentStore, _name, _guarded(_name, _spec))
walkguard.refuse_async(StudentStore)


class _StoreFile:
    """A file of the store whose errors say when the store is unreachable or HDFS refuses it.

    Written files are published only by a clean close: on a local store the temporary file
    ``temp`` is renamed onto ``target`` (keeping ``target``'s mode); on an object store the back
    end uploads on close. A ``with`` block left by an exception discards what was written
    (fsspec's own files would upload the half that was written), and so does a file for writing
    that is garbage collected (or still open at exit) without ``close``: its temporary file is
    removed. The old file, if any, stays as it was.
    """

    def __init__(
        self,
        inner: Any,
        failure: Callable[[BaseException], Exception | None],
        writing: bool,
        temp: str | None = None,
        target: str | None = None,
    ) -> None:
        self._inner = inner
        self._writing = writing
        self._failure = failure
        self._temp = temp
        self._target = target
        self._done = False
        # Not a method of self, which the finalizer would keep alive.
        self._dropped = weakref.finalize(self, _drop, inner, temp) if writing else None

    def _translate(self, exc: Exception) -> Exception:
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS and not exc.filename:
            # A write's ENOSPC names no file: name the one written, so its disk can be told.
            exc.filename = self._target
        failure = self._failure(exc)
        return exc if failure is None else failure

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except StoreError:
                raise
            except Exception as exc:
                error = self._translate(exc)
                if error is exc:
                    raise
                raise error from exc

        return call

    def __iter__(self) -> Any:
        return iter(self._inner)

    @property
    def closed(self) -> bool:
        return self._done or bool(getattr(self._inner, "closed", False))

    def close(self) -> None:
        """Finish the file and publish it (rename onto the target on a local store)."""
        if self._done:
            return
        self._done = True
        self._forget()
        try:
            self._inner.close()
            if self._temp is not None:
                publish(self._temp, self._target)
        except Exception as exc:
            _remove(self._temp)
            _abort(self._inner)
            error = self._translate(exc)
            if error is exc:
                raise
            raise error from exc

    def discard(self) -> None:
        """Drop what was written; the target is left as it was."""
        if self._done:
            return
        self._done = True
        self._forget()
        if self._temp is not None:
            try:
                self._inner.close()
            finally:
                _remove(self._temp)
        else:
            _abort(self._inner)

    def _forget(self) -> None:
        """Closed or discarded by hand: nothing left for the finalizer to drop."""
        if self._dropped is not None:
            self._dropped.detach()

    def __enter__(self) -> _StoreFile:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is not None and self._writing:
            self.discard()
        else:
            self.close()


def _drop(inner: Any, temp: str | None) -> None:
    """Discard a file for writing that was never closed: close and remove the temporary file of
    a local store; on an object store, abort the upload."""
    if temp is None:
        _abort(inner)
        return
    with contextlib.suppress(Exception):  # best effort: a finalizer must not raise
        inner.close()
    _remove(temp)


def _abort(inner: Any) -> None:
    """Drop what an object store's file holds, without uploading it (best effort)."""
    discard = getattr(inner, "discard", None)  # fsspec buffered files: no upload
    try:
        if discard is not None:
            discard()
    except Exception:  # noqa: BLE001 -- best effort: the store may be gone
        pass
    if isinstance(inner, AbstractBufferedFile):
        inner.closed = True  # its __del__ would try the upload again


def _remove(temp: str | None) -> None:
    """Remove a local store's temporary file, if any and still there."""
    if temp is not None:
        with contextlib.suppress(OSError):
            os.unlink(temp)


def student_store(
    user: str | None = None,
    url: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> StudentStore:
    """The student's part of the course store as an fsspec file system (a new instance each call).

    ``store.open("datasets/fashion-mnist/...")`` reads a data set;
    ``store.pipe_file(f"home/{user}/out.txt", b"...")`` writes to the home. See
    :class:`StudentStore` for parameters and errors.
    """
    return StudentStore(user, url, storage_options, skip_instance_cache=True)


def open_store(
    url: str | None = None, storage_options: Mapping[str, Any] | None = None
) -> fsspec.AbstractFileSystem:
    """The course store, as :func:`scalelab.store.access.fs.open_store` opens it, except in a
    student's server: there (``JUPYTERHUB_USER`` set) and with no ``url``, the student's own
    view, the kernel's ``store`` (:func:`student_store`: ``home/<user>`` read-write,
    ``datasets/`` read-only), so that no call in a notebook hands out more than ``store`` may
    do. An explicit ``url`` (ops' tools) opens the whole store; the storage itself still refuses
    what the student's identity may not do.

    This is ``scalelab.store.open_store``, and the default of the streaming datasets and the
    cache. Returns a :class:`StudentStore` or a ``StoreFileSystem``; raises ``StoreConfigError``
    as :func:`~scalelab.store.access.fs.open_store` does.
    """
    if url is None and os.environ.get("JUPYTERHUB_USER"):
        return student_store(None, None, storage_options)  # URL and options from the server
    return store_fs.open_store(url, storage_options)


def register_protocol() -> None:
    """Register ``scalelab://`` with fsspec; idempotent. Done when this module is imported, so
    in a kernel ``pd.read_csv("scalelab:///datasets/...")`` reads through the student's view,
    and for jupyter-fs' drive."""
    fsspec.register_implementation(PROTOCOL, StudentStore, clobber=True)


register_protocol()
