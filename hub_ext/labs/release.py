"""Releasing the labs: student versions written from the instructor's notebooks.

Solutions and hidden tests are marked in nbgrader's syntax (``### BEGIN SOLUTION`` ...); the
student version has solutions stubbed, hidden tests removed, visible tests kept and outputs
cleared, cell for cell with their ids, through nbconvert preprocessors.
Why: docs/design-notes.md, scalelab.hub_ext.labs.release.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import nbformat
from nbconvert.preprocessors import ClearOutputPreprocessor, Preprocessor
from traitlets import Unicode

from scalelab.common.atomicfile import stage_file

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN_TESTS = "### BEGIN HIDDEN TESTS"
END_HIDDEN_TESTS = "### END HIDDEN TESTS"
#: Text that must not survive in any student notebook.
MARKERS = (BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS)

_MARKER_LINE = re.compile(
    r"^(?P<indent>\s*)(?P<marker>### (BEGIN|END) (SOLUTION|HIDDEN TESTS))\s*$"
)


class ReleaseError(Exception):
    """A notebook cannot be released; the message names the file (and cell) and the fix."""


def cell_label(index: int, cell_id: str | None = None) -> str:
    """How messages name a cell: 1-based, as a notebook shows them, with its id when it has one."""
    return f"cell {index + 1}" + (f" (id {cell_id})" if cell_id else "")


class MarkerError(ValueError):
    """Unbalanced or nested region markers in one cell (``cell`` is its 0-based index; the
    message counts from 1, like the notebook, and gives the cell's id)."""

    def __init__(self, cell: int, message: str, cell_id: str | None = None):
        super().__init__(f"{cell_label(cell, cell_id)}: {message}")
        self.cell = cell
        self.cell_id = cell_id


def _regions(source: str, cell: int, begin: str, end: str, cell_id: str | None = None):
    """Split ``source`` into ("text", lines) and ("region", indent, lines) parts.

    Raises :class:`MarkerError` for an END without BEGIN, a BEGIN inside a region or a region
    left open.
    """
    parts: list[tuple] = []
    current: list[str] = []
    indent = None
    for line in source.splitlines(keepends=True):
        match = _MARKER_LINE.match(line.rstrip("\n"))
        marker = match["marker"] if match else None
        if marker == begin:
            if indent is not None:
                raise MarkerError(
                    cell, f"{begin!r} inside an open region; close it with {end!r}", cell_id
                )
            parts.append(("text", current))
            current, indent = [], match["indent"]
        elif marker == end:
            if indent is None:
                raise MarkerError(cell, f"{end!r} without {begin!r} before it", cell_id)
            parts.append(("region", indent, current))
            current, indent = [], None
        else:
            current.append(line)
    if indent is not None:
        raise MarkerError(cell, f"{begin!r} is never closed: add {end!r}", cell_id)
    parts.append(("text", current))
    return parts


class ClearSolutions(Preprocessor):
    """Replace each ``### BEGIN SOLUTION`` … ``### END SOLUTION`` region by a stub."""

    code_stub = Unicode(
        "# YOUR CODE HERE\nraise NotImplementedError()",
        help="Lines put in place of a solution in a code cell (indented like the region).",
    ).tag(config=True)
    text_stub = Unicode(
        "YOUR ANSWER HERE", help="Text put in place of a solution in a Markdown cell."
    ).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type not in ("code", "markdown"):
            return cell, resources
        parts = _regions(cell.source, index, BEGIN_SOLUTION, END_SOLUTION, cell.get("id"))
        if len(parts) == 1:
            return cell, resources
        stub = self.code_stub if cell.cell_type == "code" else self.text_stub
        out: list[str] = []
        for part in parts:
            if part[0] == "text":
                out.extend(part[1])
            else:
                indent = part[1]
                out.extend(f"{indent}{line}\n" for line in stub.splitlines())
        cell.source = "".join(out).rstrip("\n")
        return cell, resources


class ClearHiddenTests(Preprocessor):
    """Remove each ``### BEGIN HIDDEN TESTS`` … ``### END HIDDEN TESTS`` region."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        parts = _regions(cell.source, index, BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS, cell.get("id"))
        if len(parts) > 1:
            cell.source = "".join(line for p in parts if p[0] == "text" for line in p[1])
            cell.source = cell.source.rstrip("\n")
        return cell, resources


def student_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student version of an instructor notebook (a new notebook; ``nb`` is not changed).

    Raises
    ------
    MarkerError
        A cell's markers are unbalanced or nested.
    """
    student = nbformat.from_dict(copy.deepcopy(nb))
    resources: dict = {}
    for pre in (ClearHiddenTests(), ClearSolutions(), ClearOutputPreprocessor()):
        student, resources = pre.preprocess(student, resources)
    for index, cell in enumerate(student.cells):
        leftover = [m for m in MARKERS if m in cell.source]
        if leftover:  # a marker not alone on its line, e.g. inside a string: refuse, never leak
            raise MarkerError(
                index,
                f"{leftover[0]!r} is left in the text; put each marker on a line",
                cell.get("id"),
            )
    return student


def read_source(path: Path) -> nbformat.NotebookNode:
    """Read and validate an instructor notebook; :class:`ReleaseError` names the file."""
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except (OSError, ValueError, nbformat.ValidationError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReleaseError(f"{path} is not a valid notebook ({first}); fix or remove it") from None
    return nb


def release_bytes(path: Path) -> bytes:
    """The student version of the notebook at ``path``, serialised (UTF-8 JSON, nbformat 4).

    Raises :class:`ReleaseError` naming the file for a corrupt notebook or bad markers.
    """
    nb = read_source(path)
    try:
        student = student_version(nb)
    except MarkerError as exc:
        raise ReleaseError(f"{path}: {exc}") from None
    return (nbformat.writes(student) + "\n").encode("utf-8")


def release(src_dir: str | Path, dest_dir: str | Path) -> list[Path]:
    """Write the student version of every ``*.ipynb`` in ``src_dir`` into ``dest_dir``.

    All notebooks are transformed first; if any is corrupt or has unbalanced markers, a
    :class:`ReleaseError` names it and nothing is written. Every file is then written to a
    temporary file beside its target, and only when all are written are they renamed into
    place; a ``dest_dir`` that cannot be created or written to is a :class:`ReleaseError` too,
    with nothing written.

    Returns
    -------
    list of Path
        The files written, in name order.
    """
    src, dest = Path(src_dir), Path(dest_dir)
    if not src.is_dir():
        raise ReleaseError(f"{src} is not a folder: give the folder of the instructor notebooks")
    if src.resolve() == dest.resolve():
        raise ReleaseError(f"{dest} is the source folder: release into another folder")
    sources = sorted(src.glob("*.ipynb"))
    if not sources:
        raise ReleaseError(f"{src} holds no notebooks (*.ipynb)")
    released = {path.name: release_bytes(path) for path in sources}
    staged: list[tuple[Path, Path]] = []
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for name, content in released.items():
            staged.append((stage_file(dest / name, content), dest / name))
    except OSError as exc:
        for tmp, _target in staged:
            tmp.unlink(missing_ok=True)
        reason = exc.strerror or type(exc).__name__
        raise ReleaseError(
            f"cannot write the student versions into {dest} ({reason}): give a folder you can "
            "write to (it is created if missing)"
        ) from None
    for tmp, target in staged:
        os.replace(tmp, target)
    return [target for _tmp, target in staged]
