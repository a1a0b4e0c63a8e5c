"""The store as a folder of the JupyterLab home: contents API paths to drive paths and back (pure).

``store/<path>`` in the file browser (``c.StoreDrive.folder_name``) is jupyter-fs' drive path
``<drive>:<path>``, and ``<path>`` is the path the kernel's ``store`` takes
(``store/home/alice/x.csv`` is ``store.open("home/alice/x.csv")``); these functions map one to
the other for :class:`~scalelab.hub_ext.server.store_contents.StoreMetaManager`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: The folder's default name at the home's root.
DEFAULT_FOLDER = "store"


def check_folder_name(name: str) -> str:
    """``name`` if it can name the store's folder at the home's root; else ValueError.

    The name must be one folder name: not empty, no ``/`` or ``\\``, no ``:`` (which jupyter-fs
    reads as a drive), not ``.`` or ``..``, and not hidden (a leading ``.``).
    """
    if not name or name.startswith(".") or any(c in name for c in "/\\:\0"):
        raise ValueError(
            f"{name!r} cannot name the course store's folder: use one visible folder name "
            "without '/', '\\', ':' or a leading '.', such as 'store'."
        )
    return name


def store_part(path: str, folder: str) -> str | None:
    """The part of the contents API ``path`` below the store's ``folder``: ``""`` for the folder
    itself, None for a path outside it (the home's).

    Leading and trailing ``/`` are ignored; the rest is passed on as it is, ``..`` and ``/``
    included, for the store's guard to refuse (:mod:`scalelab.store.access.guard`).
    """
    stripped = path.strip("/")
    if stripped == folder:
        return ""
    if stripped.startswith(folder + "/"):
        return stripped[len(folder) + 1 :]
    return None


def drive_path(part: str, drive: str) -> str:
    """The jupyter-fs path of the store path ``part``: ``<drive>:<part>``."""
    return f"{drive}:{part}"


def api_path(store_path: str, folder: str) -> str:
    """The contents API path of a path relative to the store root (``home/alice/x.csv`` ->
    ``store/home/alice/x.csv``; the root ``""`` -> ``store``)."""
    rest = store_path.strip("/")
    return f"{folder}/{rest}" if rest else folder


def api_model(
    model: Mapping[str, Any], folder: str, writable: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    """A model of jupyter-fs' store drive as the contents API's: ``path`` (and each ``path`` of a
    directory's ``content`` list) under ``folder``; the store root is named ``folder``.

    ``writable(store_path)``, when given, sets each model's ``writable`` (jupyter-fs says True
    everywhere), so that JupyterLab opens a read-only file (``datasets/...``) as read-only.
    Returns a new dict; ``model`` is left as it was.
    """
    out = dict(model)
    rel = str(model.get("path") or "").strip("/")
    out["path"] = api_path(rel, folder)
    if not rel:
        out["name"] = folder
    if writable is not None:
        out["writable"] = writable(rel)
    content = model.get("content")
    if model.get("type") == "directory" and isinstance(content, list):
        out["content"] = [api_model(entry, folder, writable) for entry in content]
    return out


def with_entry(listing: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """The home root's ``listing`` (a directory model with content) with ``entry`` added, unless
    an entry of the same name is there already (a real file or folder wins)."""
    out = dict(listing)
    content = list(listing.get("content") or [])
    if all(e.get("name") != entry.get("name") for e in content):
        content.append(dict(entry))
    out["content"] = content
    return out


def crossing_message(old: str, new: str, folder: str) -> str:
    """Why the move of ``old`` to ``new`` (contents API paths, one in the store's ``folder`` and
    one in the home) is refused, and what to do instead."""
    if store_part(new, folder) == "":
        return (
            f"{new.strip('/')!r} is the name of the course store's folder in your home: "
            "choose another name."
        )
    into_store = store_part(new, folder) is not None
    there = "the course store" if into_store else "your home"
    target = new.strip("/").rpartition("/")[0] or "your home's top folder"
    return (
        f"Moving {old.strip('/')!r} to {there} is not possible: your home and the course store "
        f"are different disks. Copy it instead (Copy, then Paste in {target}) and delete the "
        "original once the copy is there."
    )
