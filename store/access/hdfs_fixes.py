"""Fixes to the HDFS clients' fsspec file systems, found by fsspec's own conformance tests.

hdfs-native 0.14's ``HdfsFileSystem`` and fsspec's ``WebHDFS`` take one path in ``rm`` (fsspec's
``DirFileSystem`` hands them a list for ``rm([...])``); hdfs-native's ``cp_file`` writes its
temporary copy at ``.<path>``, a path relative to the user's HDFS home (the namenode refuses
``/user/alice/./course/...``); neither knows exclusive create (mode ``"xb"``);
``WebHDFS.cp_file`` fails on a folder and leaves its temporary file where the rename answers
``false``, and ``WebHDFS.ls`` of a file names it ``<file>/``. Each fix is the
back end's own operation, called as its API meant; see
``tests/integration/hadoop/test_store_hdfs_cluster.py``'s conformance classes.
"""

from __future__ import annotations

import posixpath
import secrets
import shutil
from contextlib import suppress
from typing import Any

from fsspec.implementations.webhdfs import WebHDFS


class HdfsFixes:
    """What both clients get: ``rm`` of one path or a list of them (fsspec's
    ``AbstractFileSystem.rm`` contract), and a copy through a temporary file beside its target."""

    def rm(self, path: Any, recursive: bool = False, **kwargs: Any) -> None:
        if isinstance(path, (list, tuple)):
            for one in path:
                super().rm(one, recursive=recursive, **kwargs)  # type: ignore[misc]
            return
        super().rm(path, recursive=recursive, **kwargs)  # type: ignore[misc]

    def _copy_beside(self, path1: str, path2: str) -> None:
        """Copy ``path1`` to a temporary file in ``path2``'s folder, then :meth:`_rename_onto`
        ``path2``; the temporary file is removed when anything fails."""
        target = self._strip_protocol(path2)  # type: ignore[attr-defined]
        parent, name = posixpath.split(target)
        temp = posixpath.join(parent, f".{name}.tmp.{secrets.token_hex(6)}")
        try:
            with self.open(path1, "rb") as source, self.open(temp, "wb") as copy:  # type: ignore[attr-defined]
                shutil.copyfileobj(source, copy, 1 << 20)
            self._rename_onto(temp, target)
        except BaseException:
            with suppress(FileNotFoundError):
                self.rm(temp)
            raise

    def _rename_onto(self, temp: str, target: str) -> None:
        raise NotImplementedError


class HdfsNativeFixes(HdfsFixes):
    """hdfs-native's ``cp_file`` beside its target, and exclusive create."""

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        """Copy through a temporary file in ``path2``'s folder, renamed onto ``path2``."""
        self._copy_beside(path1, path2)

    def _rename_onto(self, temp: str, target: str) -> None:
        self.mv(temp, target)  # type: ignore[attr-defined]

    def _exclusive(self, path: str, mode: str, **kwargs: Any) -> Any:
        """``mode`` ``"xb"``: create ``path``, FileExistsError if it is there (the namenode
        decides, in one step: ``overwrite=False``)."""
        try:
            return super()._open(path, "wb", overwrite=False, **kwargs)  # type: ignore[misc]
        except RuntimeError as exc:
            if "AlreadyExistsException" in str(exc):
                raise FileExistsError(f"{path} already exists") from None
            raise


class WebHDFSStore(HdfsFixes, WebHDFS):
    """fsspec's ``WebHDFS`` (protocol ``webhdfs``, same arguments) with ``rm`` of a list,
    ``cp_file`` of a folder (makes it, as fsspec's local file system does; fsspec's generic
    ``copy`` hands it folders), and exclusive create."""

    def ls(self, path: str, detail: bool = False, **kwargs: Any) -> list[Any]:
        """``WebHDFS.ls``, except that a file lists as its own name: LISTSTATUS of a file gives
        an empty ``pathSuffix``, which ``WebHDFS`` made ``<file>/``, and a recursive glob then
        found the file twice (once as a folder) and copied it over its own target folder."""
        out = super().ls(path, detail=detail, **kwargs)
        if detail:
            return [{**e, "name": e["name"].rstrip("/") or e["name"]} for e in out]
        return [name.rstrip("/") or name for name in out]

    def cp_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
        """Copy through a temporary file beside ``rpath``, renamed onto it with
        ``renameoptions=OVERWRITE`` (the namenode's ``rename2``, which fails aloud where the
        plain ``RENAME`` that ``WebHDFS.cp_file`` uses answers ``false`` and leaves the
        temporary file); a folder is made."""
        if self.isdir(lpath):
            self.makedirs(rpath, exist_ok=True)
            return
        target = self._strip_protocol(rpath)
        parent, name = posixpath.split(target)
        temp = posixpath.join(parent, f".{name}.tmp.{secrets.token_hex(6)}")
        try:
            with self.open(lpath, "rb") as source, self.open(temp, "wb") as copy:
                shutil.copyfileobj(source, copy, 1 << 20)
            self._call("RENAME", "put", path=temp, destination=target, renameoptions="OVERWRITE")
        except BaseException:
            with suppress(FileNotFoundError):
                self.rm(temp)
            raise

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if mode == "xb":
            self._create_empty(path)
            mode = "wb"
        return super()._open(path, mode, **kwargs)

    def _create_empty(self, path: str) -> None:
        """Create ``path`` empty, or raise FileExistsError: the datanode's ``CREATE`` with
        ``overwrite=false`` decides, in one step."""
        out = self._call("CREATE", "PUT", path, redirect=False, overwrite="false")
        location = self._apply_proxy(out.headers["Location"])
        made = self.session.put(location, headers={"content-type": "application/octet-stream"})
        if made.status_code == 403 and "AlreadyExistsException" in made.text:
            raise FileExistsError(f"{path} already exists")
        made.raise_for_status()
