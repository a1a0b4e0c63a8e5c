"""Delivering the course labs into a student's home, without ever losing the student's work.

:func:`sync_labs` (at every server start, and from the "Get new labs" page) copies new labs in,
replaces unchanged copies, puts a new version beside a changed one, and tracks what it wrote in
``.scalelab/labs.json`` (:data:`MANIFEST`, read only by :func:`parse_manifest`); its repairs
are :attr:`SyncReport.warnings`. Why: docs/design-notes.md, scalelab.hub_ext.labs.sync.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
import time
from importlib.resources import files
from pathlib import Path

import nbformat

from scalelab import envvars
from scalelab.common.atomicfile import stage_file, write_atomic
from scalelab.hub_ext.labs.release import MARKERS, cell_label

#: The manifest of delivered labs, relative to the home.
MANIFEST = Path(".scalelab") / "labs.json"
_FORMAT = 1
#: A manifest larger than this is malformed: ScaleLab writes a few hundred bytes per lab.
MAX_MANIFEST_BYTES = 1 << 20
_MAX_VERSION = 1_000_000
_SHA_HEX = re.compile(r"[0-9a-f]{64}")


def bundled_labs(labs_dir: str | None = None) -> dict[str, bytes]:
    """The released labs to deliver: file name -> notebook bytes (``.ipynb`` JSON).

    From the folder ``labs_dir``, else the one in ``$SCALELAB_LABS_DIR``
    (:data:`scalelab.envvars.LABS_DIR`) when set, so instructors can release into a shared
    folder without reinstalling ScaleLab; else the ones shipped in the package. Raises
    ``OSError`` when that folder cannot be read.
    """
    override = labs_dir or os.environ.get(envvars.LABS_DIR)
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
    """What one sync did: file names relative to the home, and messages for the student.

    ``copied``, ``updated``, ``beside``: files written (a new lab, a new version over ScaleLab's
    own unchanged copy, a new version next to a changed copy or to a folder in the lab's place).
    ``messages``: one line each for the student, ``warnings`` included. ``refused`` and
    ``problems``: labs of the release that were not delivered, and why. ``warnings``: the lines
    of ``messages`` that say what the sync found wrong in the home and how it went round it (a
    malformed or lost manifest rebuilt, a folder named like a lab), for the server log.
    """

    copied: list[str] = dataclasses.field(default_factory=list)
    updated: list[str] = dataclasses.field(default_factory=list)
    beside: list[str] = dataclasses.field(default_factory=list)
    messages: list[str] = dataclasses.field(default_factory=list)
    #: Labs not delivered (:func:`lab_problem`), and why, one line each.
    refused: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    #: What was wrong in the home and repaired or gone round, one line each (also in messages).
    warnings: list[str] = dataclasses.field(default_factory=list)

    def warn(self, line: str) -> None:
        """Add ``line`` to ``warnings`` and ``messages``."""
        self.warnings.append(line)
        self.messages.append(line)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _kind(path: Path) -> str | None:
    """What is at ``path``: None (nothing), ``"file"`` (a regular file, or a link to one), or
    words for a message: "a folder", "a broken link", "not a regular file", "unreadable (...)".
    Never raises."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken link" if os.path.islink(path) else None
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return "file"
    return "a folder" if stat.S_ISDIR(mode) else "not a regular file"


def _state(path: Path) -> tuple[str | None, str | None]:
    """What is at ``path``: ``(None, None)`` nothing, ``(None, sha)`` a regular file and the
    SHA-256 of its bytes, ``(words, None)`` anything else (see :func:`_kind`). Never raises;
    never opens anything but a regular file (a FIFO would block)."""
    kind = _kind(path)
    if kind != "file":
        return kind, None
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as src:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})", None
    return None, digest.hexdigest()


def _empty_manifest() -> dict:
    return {"format": _FORMAT, "labs": {}, "files": {}}


def _show(value: object) -> str:
    """A value from the manifest as the student would see it in the file, cut to 40 chars."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:39] + "\u2026"


def _a(value: object) -> str:
    """What kind of JSON value ``value`` is, in words."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool) or value is None:
        return _show(value)
    return "a number"


def _lab_entry_problem(name: str, entry: object) -> str | None:
    if not isinstance(entry, dict):
        return f"the entry for {name} is {_a(entry)}, not an object"
    for key in ("release", "version"):
        if key not in entry:
            return f'the entry for {name} has no "{key}"'
    release, version = entry["release"], entry["version"]
    if not (isinstance(release, str) and _SHA_HEX.fullmatch(release)):
        return f'the entry for {name} has "release" {_show(release)}, not a SHA-256'
    if (
        isinstance(version, bool)
        or not isinstance(version, int)
        or not 1 <= version <= _MAX_VERSION
    ):
        return (
            f'the entry for {name} has "version" {_show(version)}, not a whole number '
            f"from 1 to {_MAX_VERSION}"
        )
    return None


def parse_manifest(data: bytes) -> tuple[dict, list[str]]:
    """Check the bytes of a manifest (:data:`MANIFEST`); never raises.

    Returns
    -------
    tuple[dict, list[str]]
        The manifest, ``{"format": 1, "labs": {name: {"release": sha256, "version": int >= 1}},
        "files": {name: sha256}}``, holding only what was well-formed; and one clause per
        problem found (``[]`` when the manifest is well-formed), e.g. ``'it is not valid JSON
        (Expecting value: line 1 column 1 (char 0))'`` or ``'the entry for lab1.ipynb has
        "version" "abc", not a whole number from 1 to 1000000'``. Content that is not a JSON
        object of that shape, or a wrong ``"format"``, gives an empty manifest; a malformed
        entry of ``labs`` or ``files`` drops both entries of that name, so the lab is rebuilt
        from the home. Keys other than these three are ignored.
    """
    if len(data) > MAX_MANIFEST_BYTES:
        return _empty_manifest(), [f"it is larger than {MAX_MANIFEST_BYTES} bytes"]
    if not data.strip():
        return _empty_manifest(), ["it is empty"]
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return _empty_manifest(), ["it is not text (not UTF-8)"]
    except RecursionError:
        return _empty_manifest(), ["it is not valid JSON (nested too deeply)"]
    except ValueError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return _empty_manifest(), [f"it is not valid JSON ({first})"]
    if not isinstance(raw, dict):
        return _empty_manifest(), [f"it holds {_a(raw)}, not an object"]
    if "format" not in raw:
        return _empty_manifest(), ['it has no "format"']
    if raw["format"] != _FORMAT or isinstance(raw["format"], bool):
        return _empty_manifest(), [f'its "format" is {_show(raw["format"])}, not {_FORMAT}']
    problems = []
    for key in ("labs", "files"):
        if key not in raw:
            problems.append(f'it has no "{key}"')
        elif not isinstance(raw[key], dict):
            problems.append(f'its "{key}" is {_a(raw[key])}, not an object')
    if problems:
        return _empty_manifest(), problems
    labs, recorded, dropped = {}, {}, set()
    for name, entry in raw["labs"].items():
        problem = _lab_entry_problem(name, entry)
        if problem:
            problems.append(problem)
            dropped.add(name)
        else:
            labs[name] = {"release": entry["release"], "version": entry["version"]}
    for name, sha in raw["files"].items():
        if isinstance(sha, str) and _SHA_HEX.fullmatch(sha):
            recorded[name] = sha
        else:
            problems.append(f"the record of the file {name} is {_show(sha)}, not a SHA-256")
            dropped.add(name)
    for name in dropped:
        labs.pop(name, None)
        recorded.pop(name, None)
    return {"format": _FORMAT, "labs": labs, "files": recorded}, problems


def _load_manifest(home: Path) -> tuple[dict, list[str], Path | None]:
    """The manifest of ``home``, the problems found, and what to set aside when there are some
    (the manifest, or ``.scalelab`` when that is not a folder); ``None`` when there is no
    manifest. Never raises."""
    folder, path = home / MANIFEST.parent, home / MANIFEST
    what = _kind(folder)
    if what is None:
        return _empty_manifest(), [], None
    if what != "a folder":
        what = "a file" if what == "file" else what
        return _empty_manifest(), [f"{MANIFEST.parent} is {what}, not a folder"], folder
    what = _kind(path)
    if what is None:
        return _empty_manifest(), [], None
    if what != "file":
        what = what if what == "not a regular file" else f"{what}, not a file"
        return _empty_manifest(), [f"it is {what}"], path
    try:
        with open(path, "rb") as src:
            data = src.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        return _empty_manifest(), [], None
    except OSError as exc:
        return _empty_manifest(), [f"it cannot be read ({exc.strerror or exc})"], path
    manifest, problems = parse_manifest(data)
    return manifest, problems, path if problems else None


def read_manifest(home: Path) -> dict:
    """The manifest of ``home``, as :func:`parse_manifest` returns it: only its well-formed
    entries; an empty one when it is missing or unreadable. Never raises, changes nothing (a
    sync with an empty manifest never overwrites a file, it only puts new versions beside changed
    ones)."""
    return _load_manifest(Path(home))[0]


def _set_aside(path: Path) -> Path:
    """Rename ``path`` to ``<name>.bad-<UTC timestamp>`` beside it (never over a file)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for attempt in range(1000):
        aside = path.with_name(f"{path.name}.bad-{stamp}" + (f"-{attempt + 1}" if attempt else ""))
        if not os.path.lexists(aside):
            os.rename(path, aside)
            return aside
    raise FileExistsError(f"no free name to set {path} aside")


def _open_manifest(home: Path, report: SyncReport) -> tuple[dict, bool]:
    """The manifest for a sync, and whether there was none; a malformed one is set aside,
    replaced by its well-formed part, and each problem goes to ``report`` as one line.

    Raises ``OSError`` when the manifest cannot be set aside or written."""
    manifest, problems, bad = _load_manifest(home)
    if not problems or bad is None:
        return manifest, not os.path.lexists(home / MANIFEST)
    aside = _set_aside(bad).relative_to(home)
    for problem in problems:
        report.warn(
            f"ScaleLab's record of your labs, {MANIFEST}, was malformed ({problem}); it was "
            f"kept as {aside} and rebuilt from the labs in your home: none of your files changed"
        )
    _save_manifest(home, manifest)
    return manifest, False


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
    """The notebook with a first Markdown cell telling the student why it is beside theirs.

    The same bytes for the same release, name and version (the cell's id is fixed), so a sync
    that lost its manifest recognises the copy it put beside before and writes no second one."""
    nb = nbformat.reads(content.decode("utf-8"), as_version=4)
    notice = nbformat.v4.new_markdown_cell(
        f"**Version {version} of this lab.** You had changed `{name}`, so ScaleLab left it "
        "exactly as it was and put the new version here. Copy over what you need; "
        "delete this file when you are done with it.",
        metadata={"tags": ["scalelab-notice"]},
    )
    notice.id = "scalelab-notice"
    nb.cells.insert(0, notice)
    return (nbformat.writes(nb) + "\n").encode("utf-8")


def _create_new(target: Path, content: bytes) -> bool:
    """Write ``target`` only if nothing is there (False if something appeared meanwhile)."""
    tmp = stage_file(target, content)
    try:
        os.link(tmp, target)  # atomic, and fails if the student created the file meanwhile
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink()


def _beside_pattern(name: str) -> re.Pattern[str]:
    """Matches the names :func:`_beside_name` gives versions of ``name``; group 1: N."""
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    return re.compile(
        rf"{re.escape(stem)} \(v([1-9][0-9]{{0,6}})(?:, [0-9]+)?\){re.escape(dot + ext)}"
    )


def _recognise(
    home: Path, name: str, content: bytes, listing: list[str]
) -> tuple[int, dict[str, str]] | None:
    """A lab the manifest knows nothing of, found in the home as this release delivered it:
    ``name`` holding the release's bytes, or ``<name> (vN)`` holding them as :func:`sync_labs`
    writes them beside a changed copy or a folder. Returns (highest N found, else 1; the files
    found: name -> SHA-256), or None when no file holds it."""
    release_sha = _sha(content)
    found: dict[str, str] = {}
    version = 0
    if _state(home / name) == (None, release_sha):
        found[name], version = release_sha, 1
    pattern = _beside_pattern(name)
    for entry in listing:
        match = pattern.fullmatch(entry)
        if not match:
            continue
        n = int(match[1])
        _, sha = _state(home / entry)
        if sha is not None and sha in (release_sha, _sha(_with_notice(content, name, n))):
            found[entry], version = sha, max(version, n)
    return (version, found) if found else None


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
        Files copied, updated in place and put beside a changed copy (or beside a folder in the
        lab's place), with one message each; a malformed manifest set aside and rebuilt, a lost
        one rebuilt, and a folder in a lab's place in ``warnings``, one line each. Nothing in
        the home, however malformed, makes it raise.

    Raises
    ------
    OSError
        Reading the released labs failed, or writing failed (e.g. ``ENOSPC``, ``EACCES``):
        files written so far are complete and recorded, no file is half written, and the next
        sync carries on.
    """
    home = Path(home)
    labs = bundled_labs() if labs is None else labs
    report = SyncReport()
    manifest, missing = _open_manifest(home, report)
    listing: list[str] | None = None
    rebuilt = []
    for name, content in labs.items():
        problem = lab_problem(name, content)
        if problem:
            report.refused.append(name)
            report.problems.append(problem)
            continue
        release_sha = _sha(content)
        entry = manifest["labs"].get(name)
        if entry and entry["release"] == release_sha:
            continue  # delivered already: deleted or renamed copies stay so
        if entry is None:
            listing = sorted(os.listdir(home)) if listing is None else listing
            found = _recognise(home, name, content, listing)
            if found:  # delivered already, by a sync whose manifest is gone: no second copy
                manifest["files"].update(found[1])
                manifest["labs"][name] = {"release": release_sha, "version": found[0]}
                rebuilt.append(name)
                _save_manifest(home, manifest)
                continue
        version = entry["version"] + 1 if entry else 1
        target = home / name
        odd, current = _state(target)
        if odd is None and current is None:
            if _create_new(target, content):
                manifest["files"][name] = release_sha
                report.copied.append(name)
                report.messages.append(
                    f"New lab: {name}" if entry is None else f"{name}: version {version} copied in"
                )
            else:
                odd, current = _state(target)
        if odd is not None:  # a folder (or a FIFO...) named like the lab: never into or over it
            placed, sha = _place_beside(home, name, content, version, notice=False)
            manifest["files"][placed] = sha
            report.beside.append(placed)
            report.warn(f"{name} is {odd}; the lab was put beside it as {placed}")
        elif current is not None and current == release_sha:
            manifest["files"][name] = release_sha
        elif current is not None and manifest["files"].get(name) == current:
            write_atomic(target, content)  # untouched since ScaleLab wrote it
            manifest["files"][name] = release_sha
            report.updated.append(name)
            report.messages.append(f"{name}: updated to version {version}")
        elif current is not None:
            if entry is None:
                version = 2  # a copy from before manifests: call the new one version 2
            placed, sha = _place_beside(home, name, content, version)
            manifest["files"][placed] = sha
            report.beside.append(placed)
            report.messages.append(
                f"{name}: you changed it, so it is kept as it is; "
                f"version {version} is in '{placed}'"
            )
        manifest["labs"][name] = {"release": release_sha, "version": version}
        _save_manifest(home, manifest)
    if missing and rebuilt:
        report.warn(
            f"ScaleLab's record of your labs, {MANIFEST}, was missing; it was rebuilt from the "
            f"labs in your home ({', '.join(rebuilt)}): none of your files changed"
        )
    return report


def _place_beside(
    home: Path, name: str, content: bytes, version: int, notice: bool = True
) -> tuple[str, str]:
    """Write the new version next to ``name`` (with a first cell saying why when ``notice``);
    returns (file name, SHA-256). Takes the first ``<name> (vN[, k])`` that is free or already
    holds these bytes; raises ``FileExistsError`` when none of 1000 is."""
    data = _with_notice(content, name, version) if notice else content
    sha = _sha(data)
    for attempt in range(1000):
        beside = _beside_name(name, version, attempt)
        odd, existing = _state(home / beside)
        if odd is None and existing == sha:
            return beside, sha  # written by an interrupted sync before
        if odd is None and existing is None and _create_new(home / beside, data):
            return beside, sha
    raise FileExistsError(f"no free name for version {version} of {name} in {home}")
