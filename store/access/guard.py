"""Which paths of the course store a student may see, read and write (pure logic, no I/O).

Two roots: ``home/<user>`` (read and write) and ``datasets/`` (read only); the store root and
``home`` are the view's own folders (:class:`StoreView`). Absolute paths, URLs and ``..`` are
refused outright; symlinks are checked by the I/O layer with :meth:`StoreView.check_target`.
Why: docs/design-notes.md, scalelab.store.access.guard.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from scalelab.common.atomicfile import is_part_name
from scalelab.store.errors import StoreAccessError, StoreConfigError

#: The folder of the store that holds the students' homes.
HOMES = "home"
#: The folder of the store that holds the shared, read-only data sets.
DATASETS = "datasets"


def validate_user(user: str) -> str:
    """Return ``user`` if it can name a home folder; raise StoreConfigError otherwise.

    JupyterHub user names are already restricted; this refuses the few that would name another
    folder (empty, ``.``, ``..``, or containing ``/``, ``\\`` or NUL).
    """
    if not user or user in (".", "..") or any(c in user for c in "/\\\0"):
        raise StoreConfigError(
            f"{user!r} cannot name a home folder in the course store: set JUPYTERHUB_USER "
            "(or pass user=...) to a user name without '/', '\\\\' or '..'."
        )
    return user


def split_path(path: str) -> list[str]:
    """``path`` (relative to the store root) as its parts, ``.`` and empty parts dropped.

    Raises
    ------
    StoreAccessError
        ``path`` is absolute, a URL, contains a NUL byte or a ``..`` part.
    """
    if not isinstance(path, str):
        raise TypeError(f"store paths are strings, not {type(path).__name__}")
    if path.startswith("/") or "://" in path or "\0" in path:
        raise StoreAccessError(
            f"{path!r} is not a path inside the course store: use a path relative to the store "
            "root, such as 'home/<you>/file.txt' or 'datasets/<name>/...'."
        )
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise StoreAccessError(
            f"{path!r} uses '..', which the course store refuses: write the path from the store "
            "root, such as 'home/<you>/file.txt'."
        )
    return parts


@dataclass(frozen=True)
class StoreView:
    """A student's view of the store: ``home/<user>`` read-write, ``datasets/`` read-only."""

    user: str

    def __post_init__(self) -> None:
        validate_user(self.user)

    @property
    def home(self) -> str:
        """The student's home, relative to the store root: ``home/<user>``."""
        return f"{HOMES}/{self.user}"

    def _refuse(self, path: str, what: str) -> StoreAccessError:
        return StoreAccessError(
            f"{what} {path!r} is not allowed: in the course store you may read and write "
            f"{self.home}/... and read {DATASETS}/..."
        )

    def readable(self, parts: list[str]) -> bool:
        """May the student read (or list) the path with these parts?"""
        if len(parts) <= 1 and (not parts or parts[0] in (HOMES, DATASETS)):
            return True  # the root, "home" and "datasets": listable (home filtered by visible())
        return parts[0] == DATASETS or parts[:2] == [HOMES, self.user]

    @property
    def roots(self) -> tuple[str, str]:
        """The two roots of the student's part: ``home/<user>`` and ``datasets``."""
        return (self.home, DATASETS)

    def children(self, path: str) -> tuple[str, ...] | None:
        """What one of the view's own folders holds, None for any other path (the store's).

        ``path`` is normalised (as :meth:`check` returns it): ``""`` (the store root) holds
        ``datasets`` and ``home``; ``home`` holds ``home/<user>`` alone.
        """
        if path == "":
            return (DATASETS, HOMES)
        if path == HOMES:
            return (self.home,)
        return None

    def is_folder(self, path: str) -> bool:
        """Whether the normalised ``path`` is a folder of the view whatever the store holds: the
        root, ``home``, ``home/<user>`` and ``datasets`` (an object store has no folders, and
        the home of a new student holds nothing yet)."""
        return path in ("", HOMES, *self.roots)

    def walk_roots(self, path: str) -> tuple[str, ...]:
        """Where a walk from the normalised, readable ``path`` asks the store: the roots below
        the root (``datasets``, ``home/<user>``) or below ``home`` (``home/<user>``); ``path``
        itself inside a root."""
        children = self.children(path)
        if children is None:
            return (path,)
        return tuple(root for child in children for root in self.walk_roots(child))

    def writable(self, parts: list[str]) -> bool:
        """May the student create, change or delete the path with these parts?"""
        return len(parts) >= 2 and parts[:2] == [HOMES, self.user]

    def check(self, path: str, write: bool = False, verb: str = "") -> str:
        """Normalise ``path`` and check that the student may read (or, with ``write``, write) it.

        ``verb`` names the action in a refusal (``"deleting"``, ``"moving"``); by default
        ``"writing"`` or ``"reading"``.

        Returns
        -------
        str
            The path, normalised: parts joined with ``/``, no leading or trailing ``/``;
            ``""`` is the store root.

        Raises
        ------
        StoreAccessError
            The path leaves the allowed roots, or ``write`` is asked outside the home.
        """
        parts = split_path(path)
        if write and not self.writable(parts):
            if parts and parts[0] == DATASETS:
                raise StoreAccessError(
                    f"{verb or 'writing'} {path!r} is not allowed: {DATASETS}/ is read-only; "
                    f"write to {self.home}/... instead."
                )
            raise self._refuse(path, verb or "writing")
        if not write and not self.readable(parts):
            raise self._refuse(path, verb or "reading")
        return "/".join(parts)

    def visible(self, path: str) -> bool:
        """Whether a path found by a listing (relative to the store root) may be shown.

        ScaleLab's own temporary files (``.<name>.scalelab-<8 hex digits>.part``, left by a
        write that was never closed) are not shown, though they may be read.
        """
        try:
            parts = split_path(path)
        except StoreAccessError:
            return False
        return bool(parts) and self.readable(parts) and not is_part_name(parts[-1])

    def check_target(
        self, root: str, target: str, path: str, write: bool = False, verb: str = ""
    ) -> None:
        """Refuse a local path whose real location (symlinks resolved) leaves the allowed roots.

        Parameters
        ----------
        root
            The store root's real path on the local disk.
        target
            The real path (``os.path.realpath``) that ``path`` resolves to.
        path
            The path as the student gave it, for the message.
        write
            The path is to be written: ``target`` must be inside the home.

        Raises
        ------
        StoreAccessError
            ``target`` is not the root itself or inside the home or ``datasets/``; with
            ``write``, not inside the home.
        """
        rel = posixpath.relpath(target, root) if target != root else ""
        if rel == ".." or rel.startswith("../") or posixpath.isabs(rel):
            raise StoreAccessError(
                f"{path!r} is a link that leaves the course store; links may only point inside "
                f"{self.home}/ or {DATASETS}/."
            )
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if not self.readable(parts):
            raise StoreAccessError(
                f"{path!r} is a link to {rel!r}, outside {self.home}/ and {DATASETS}/; "
                "links may only point inside them."
            )
        if write and not self.writable(parts):
            raise StoreAccessError(
                f"{verb or 'writing'} {path!r} is not allowed: it is a link to {rel!r}, which is "
                f"read-only; write to {self.home}/... itself."
            )
