"""Delivering the course labs into a student's home, without ever losing the student's work.

The labs ship as package data: the released student versions in ``scalelab.notebooks``'s
``release/`` folder (written by ``scalelab labs release notebooks notebooks/release``; the
instructor notebooks beside them are not delivered). :func:`sync_labs` runs at every server
start and on the "Get new labs" page of the server extension. Per lab:

- a lab never delivered is copied in;
- a new version replaces the student's copy only if the student has not changed it (its bytes
  are those ScaleLab wrote there); a changed copy is left alone and the new version lands beside
  it as ``<name> (v<N>).ipynb``, with a first cell that says so;
- a lab the student deleted or renamed comes back only when there is a new version of it.

What was delivered is tracked in the home, in ``.scalelab/labs.json`` (:data:`MANIFEST`): for
each lab the SHA-256 of its release and its version number, for each file written the SHA-256 of
the bytes written. Every write (notebooks and manifest) goes to a temporary file beside its target
and is renamed into place, so an interrupted sync (disk full, server stopped) leaves each file
either old or new, and the next sync finishes the job.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from importlib.resources import files
from pathlib import Path

import nbformat

from scalelab import envvars
from scalelab.common.atomicfile import stage_file, write_atomic
from scalelab.hub_ext.labs.release import MARKERS, cell_label

#: The manifest of delivered labs, relative to the home.
MANIFEST = Path(".scalelab") / "labs.json"
_FORMAT = 1


def bundled_labs() -> dict[str, bytes]:
    """The released labs to deliver: file name -> notebook bytes (``.ipynb`` JSON).

    From the folder in ``$SCALELAB_LABS_DIR`` (:data:`scalelab.envvars.LABS_DIR`) when set, so
    instructors can release into a shared folder without reinstalling ScaleLab; else the ones
    shipped in the package. Raises ``OSError`` when that folder cannot be read.
    """
    override = os.environ.get(envvars.LABS_DIR)
    folder = Path(override) if override else files("scalelab.notebooks") / "release"
    return {
        entry.name: entry.read_bytes()
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".ipynb")
    }


def lab_problem(name: str, content: bytes) -> str | None:
    """Why the released lab ``name`` must not be delivered, as one line; None when it may be.

    Refused: a file that is not a valid notebook, and an instructor notebook that still holds
    nbgrader markers (``### BEGIN SOLUTION`` ...): solutions or hidden tests would reach the
    student.
    """
    try:
        nb = nbformat.reads(content.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001 -- nbformat raises many kinds on odd JSON
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        return (
            f"{name} is not a valid notebook ({first}); it was not delivered: "
            "release the labs again with `scalelab labs release SRC_DIR DEST_DIR`"
        )
    for index, cell in enumerate(nb.cells):
        marker = next((m for m in MARKERS if m in cell.get("source", "")), None)
        if marker:
            where = cell_label(index, cell.get("id"))
            return (
                f"{name} is an instructor notebook: {where} holds {marker!r}; it was not "
                "delivered: deliver the student version written by "
                "`scalelab labs release SRC_DIR DEST_DIR`"
            )
    return None


@dataclasses.dataclass
class SyncReport:
    """What one sync did: file names relative to the home, and messages for the student."""

    copied: list[str] = dataclasses.field(default_factory=list)
    updated: list[str] = dataclasses.field(default_factory=list)
    beside: list[str] = dataclasses.field(default_factory=list)
    messages: list[str] = dataclasses.field(default_factory=list)
    #: Labs not delivered (:func:`lab_problem`), and why, one line each.
    refused: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _file_sha(path: Path) -> str | None:
    try:
        return _sha(path.read_bytes())
    except FileNotFoundError:
        return None


def read_manifest(home: Path) -> dict:
    """The manifest of ``home`` (an empty one if missing or unreadable: a sync with an empty
    manifest never overwrites a file, it only puts new versions beside changed ones)."""
    try:
        data = json.loads((home / MANIFEST).read_text())
        if data.get("format") == _FORMAT:
            return {"format": _FORMAT, "labs": dict(data["labs"]), "files": dict(data["files"])}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return {"format": _FORMAT, "labs": {}, "files": {}}


def _save_manifest(home: Path, manifest: dict) -> None:
    (home / MANIFEST.parent).mkdir(exist_ok=True)
    write_atomic(home / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())


def _beside_name(name: str, version: int, attempt: int) -> str:
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    label = f"v{version}" if attempt == 0 else f"v{version}, {attempt + 1}"
    return f"{stem} ({label}){dot}{ext}"


def _with_notice(content: bytes, name: str, version: int) -> bytes:
    """The notebook with a first Markdown cell telling the student why it is beside theirs."""
    nb = nbformat.reads(content.decode("utf-8"), as_version=4)
    notice = nbformat.v4.new_markdown_cell(
        f"**Version {version} of this lab.** You had changed `{name}`, so ScaleLab left it "
        "exactly as it was and put the new version here. Copy over what you need; "
        "delete this file when you are done with it.",
        metadata={"tags": ["scalelab-notice"]},
    )
    nb.cells.insert(0, notice)
    return (nbformat.writes(nb) + "\n").encode("utf-8")


def _create_new(target: Path, content: bytes) -> bool:
    """Write ``target`` only if no file is there (False if one appeared meanwhile)."""
    tmp = stage_file(target, content)
    try:
        os.link(tmp, target)  # atomic, and fails if the student created the file meanwhile
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink()


def sync_labs(home: str | Path, labs: dict[str, bytes] | None = None) -> SyncReport:
    """Deliver new labs and new versions of labs into ``home`` (see the module's rules).

    Parameters
    ----------
    home
        The student's home (the server's root folder); must exist.
    labs
        File name -> released notebook bytes; :func:`bundled_labs` when None. A lab that is
        not a valid notebook or still holds nbgrader markers (:func:`lab_problem`) is refused:
        nothing is written for it, its name goes to ``refused`` and the reason to ``problems``.

    Returns
    -------
    SyncReport
        Files copied, updated in place and put beside a changed copy, with one message each.

    Raises
    ------
    OSError
        Writing failed (e.g. ``ENOSPC``): files written so far are complete and recorded, no
        file is half written, and the next sync carries on.
    """
    home = Path(home)
    manifest = read_manifest(home)
    report = SyncReport()
    for name, content in (bundled_labs() if labs is None else labs).items():
        problem = lab_problem(name, content)
        if problem:
            report.refused.append(name)
            report.problems.append(problem)
            continue
        release_sha = _sha(content)
        entry = manifest["labs"].get(name)
        if entry and entry.get("release") == release_sha:
            continue  # delivered already: deleted or renamed copies stay so
        version = int(entry["version"]) + 1 if entry else 1
        target = home / name
        current = _file_sha(target)
        if current is None:
            if _create_new(target, content):
                manifest["files"][name] = release_sha
                report.copied.append(name)
                report.messages.append(
                    f"New lab: {name}" if entry is None else f"{name}: version {version} copied in"
                )
            else:
                current = _file_sha(target)
        if current is not None and current == release_sha:
            manifest["files"][name] = release_sha
        elif current is not None and manifest["files"].get(name) == current:
            write_atomic(target, content)  # untouched since ScaleLab wrote it
            manifest["files"][name] = release_sha
            report.updated.append(name)
            report.messages.append(f"{name}: updated to version {version}")
        elif current is not None:
            if entry is None:
                version = 2  # a copy from before manifests: call the new one version 2
            placed = _place_beside(home, name, content, version)
            manifest["files"][placed[0]] = placed[1]
            report.beside.append(placed[0])
            report.messages.append(
                f"{name}: you changed it, so it is kept as it is; "
                f"version {version} is in '{placed[0]}'"
            )
        manifest["labs"][name] = {"release": release_sha, "version": version}
        _save_manifest(home, manifest)
    return report


def _place_beside(home: Path, name: str, content: bytes, version: int) -> tuple[str, str]:
    """Write the new version next to the student's copy; returns (file name, SHA-256)."""
    noticed = _with_notice(content, name, version)
    sha = _sha(noticed)
    for attempt in range(1000):
        beside = _beside_name(name, version, attempt)
        existing = _file_sha(home / beside)
        if existing == sha:
            return beside, sha  # written by an interrupted sync before
        if existing is None and _create_new(home / beside, noticed):
            return beside, sha
    raise FileExistsError(f"no free name for version {version} of {name} in {home}")
