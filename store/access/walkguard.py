"""How the student's view walks the store: one rule decides what every expanding call sees.

:func:`implementation` gives the student's view fsspec's generic ``get``, ``copy``, ``find``,
``glob``, ``walk``, ``du``, ``expand_path``, ``cat`` and ``put``, run on the view itself;
:func:`fixed_part` is a glob's part checked first; :func:`refuse_async` turns async calls off.
Why: docs/design-notes.md, scalelab.store.access.walkguard.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from glob import has_magic
from typing import Any

from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractFileSystem

from scalelab.store.access.guard import split_path
from scalelab.store.errors import StoreAccessError

#: The calls that expand paths: fsspec's generic versions, run on the view, never the back end's.
WALKING = frozenset("walk find glob du expand_path get copy cat put".split())


def fixed_part(path: str) -> str:
    """The folders of a glob pattern before its first wildcard part; ``path`` if it has none.

    ``"home/*/x.txt"`` -> ``"home"``, ``"home/alice/**"`` -> ``"home/alice"``, ``"**"`` -> ``""``.
    """
    parts = path.split("/")
    for i, part in enumerate(parts):
        if has_magic(part):
            return "/".join(parts[:i])
    return path


def implementation(name: str) -> Callable[..., Any]:
    """What the view runs for method ``name`` once its paths are checked.

    fsspec's generic version for the calls in :data:`WALKING` (they list through the view's
    ``ls`` and act through its checked single-path methods); DirFileSystem's otherwise (one path,
    handed to the back end).
    """
    if name in _OWN:
        return _OWN[name]
    return getattr(AbstractFileSystem if name in WALKING else DirFileSystem, name)


def _keep_top_folder(store: Any, source: Any, dest: Any, isdir: Callable[[str], bool]) -> Any:
    # fsspec's generic get and copy name the copies after the sources' common folder, found by
    # cutting its last "/" part off: the view's top folders ("home", "datasets") have none to
    # cut, so their copies would land in dest without the folder's name (the back end, seeing
    # absolute paths, kept it). Spell such a copy as fsspec does one level down: the folder's
    # contents into dest/<folder>/.
    if not (isinstance(source, str) and isinstance(dest, str)) or source.endswith("/"):
        return source, dest
    top = store._strip_protocol(source)
    if not top or "/" in top or has_magic(top) or not (dest.endswith("/") or isdir(dest)):
        return source, dest
    return f"{top}/", f"{dest.rstrip('/')}/{top}/"


def _get(store: Any, rpath: Any, lpath: Any, *args: Any, **kwargs: Any) -> None:
    rpath, lpath = _keep_top_folder(store, rpath, lpath, LocalFileSystem().isdir)
    return AbstractFileSystem.get(store, rpath, lpath, *args, **kwargs)


def _copy(store: Any, path1: Any, path2: Any, *args: Any, **kwargs: Any) -> None:
    path1, path2 = _keep_top_folder(store, path1, path2, store.isdir)
    return AbstractFileSystem.copy(store, path1, path2, *args, **kwargs)


def _find(
    store: Any,
    path: str,
    maxdepth: int | None = None,
    withdirs: bool = False,
    detail: bool = False,
    **kwargs: Any,
) -> Any:
    if store.local:  # links: walk through the view's ls, which resolves each entry
        return AbstractFileSystem.find(
            store, path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs
        )
    # No links: the back end's own find (on S3 one listing of the prefix, where a walk would
    # also see folders left empty by SeaweedFS) of each root the walk reaches, cut down by the
    # same rule. The store root and home are the view's: never asked (a per-student key may not
    # list them), their folders added as fsspec's find would.
    if maxdepth is not None and maxdepth < 1:
        raise ValueError("maxdepth must be at least 1")
    top = store.view.check(store._strip_protocol(path))
    depth = len(split_path(top))
    found: dict[str, Any] = {}
    for root in store.view.walk_roots(top):
        parts = split_path(root)
        left = None if maxdepth is None else maxdepth - (len(parts) - depth)
        if left is None or left >= 1:
            found.update(_find_below(store, root, left, withdirs, **kwargs))
        if withdirs:  # the view's folders from top (itself unless the root, as fsspec) to root
            for i in range(max(depth, 1), len(parts) + 1):
                folder = "/".join(parts[:i])
                if store.view.is_folder(folder) and (maxdepth is None or i - depth <= maxdepth):
                    found[folder] = store.info(folder)
    names = sorted(name for name in found if store.view.visible(name))
    return {name: found[name] for name in names} if detail else names


def _find_below(
    store: Any, path: str, maxdepth: int | None, withdirs: bool, **kwargs: Any
) -> dict[str, Any]:
    """The back end's find of ``path`` (a root, or a path inside one), with details.

    A root the store holds nothing in yet is empty: s3fs then asks about the root itself as an
    object, which a per-student key may not read (a 403 for ``home/<user>`` without the ``/``).
    """
    try:
        return DirFileSystem.find(
            store, path, maxdepth=maxdepth, withdirs=withdirs, detail=True, **kwargs
        )
    except (FileNotFoundError, PermissionError):
        if path in store.view.roots and not store.ls(path, detail=False):
            return {}
        raise


def _du(
    store: Any, path: str, total: bool = True, maxdepth: Any = None, withdirs: bool = False, **kw
) -> Any:
    # fsspec's generic du, with the sizes from find's listing rather than one info() per file.
    sizes = {}
    if withdirs and store.isdir(path):
        info = store.info(path)
        sizes[info["name"]] = info["size"]
    found = store.find(path, maxdepth=maxdepth, withdirs=withdirs, detail=True, **kw)
    for name, info in found.items():
        sizes[name] = (info if "size" in info else store.info(name))["size"]
    return sum(sizes.values()) if total else sizes


for _own in (_get, _copy, _find, _du):
    _own.__doc__ = getattr(AbstractFileSystem, _own.__name__[1:]).__doc__
_OWN = {"get": _get, "copy": _copy, "find": _find, "du": _du}


def refuse_async(cls: type) -> None:
    """Give ``cls`` a refusing method for each of DirFileSystem's coroutines.

    Each raises StoreAccessError when called, naming the synchronous method to use instead.
    """
    for name, value in vars(DirFileSystem).items():
        if inspect.iscoroutinefunction(value) or inspect.isasyncgenfunction(value):
            setattr(cls, name, _refusing(name))


def _refusing(name: str) -> Callable[..., Any]:
    sync = "open" if name == "open_async" else name.lstrip("_")

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise StoreAccessError(
            f"{name}() is not available: the course store has no asynchronous API, which would "
            f"go around its checks; use {sync}() instead."
        )

    method.__name__ = method.__qualname__ = name
    return method
