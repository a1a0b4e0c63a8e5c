"""Autograding's pure parts: which cells of a lab are graded, the notebook a submission is graded
as, and its grade from the executed notebook.

A graded cell is a code cell of the instructor's notebook that holds hidden tests (nbgrader's
``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS``), worth ``metadata.scalelab.points``
(default 1). A submission is graded as the student's notebook with each graded cell's source
replaced by the instructor's, hidden tests included and the marker lines dropped (as nbgrader's
``OverwriteCells`` does): a student cannot change the tests, only the answers. A graded cell
passes when it ran without an error. Running the notebook (sandboxed, timed out) is
:mod:`scalelab.commands.autograde`'s.
Why: docs/design-notes.md, scalelab.hub_ext.labs.autograde.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import nbformat

from scalelab.hub_ext.labs.release import BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS, cell_label


@dataclass(frozen=True)
class GradedCell:
    """One graded cell of a lab: its id, its index in the instructor's notebook (0-based), its
    source as graded (hidden tests in, markers out) and its points."""

    cell_id: str
    index: int
    source: str
    points: float


@dataclass(frozen=True)
class CellGrade:
    """One graded cell's result: ``points`` earned of ``of``; ``reason`` says why none (empty
    when it passed)."""

    cell_id: str
    label: str
    points: float
    of: float
    reason: str


@dataclass(frozen=True)
class Stop:
    """Where and why a grading run stopped before its end: ``index`` of the cell (0-based, in
    the grading notebook) and ``reason`` (timed out, kernel died, memory)."""

    index: int
    reason: str


def graded_cells(instructor: nbformat.NotebookNode) -> list[GradedCell]:
    """The graded cells of the instructor's notebook, in order (pure).

    Raises
    ------
    ValueError
        A graded cell has no id (nbformat 4.5 gives every cell one: save the notebook in
        JupyterLab), or two share one.
    """
    found: list[GradedCell] = []
    for index, cell in enumerate(instructor.cells):
        if cell.cell_type != "code" or BEGIN_HIDDEN_TESTS not in cell.source:
            continue
        cell_id = cell.get("id")
        if not cell_id:
            raise ValueError(f"{cell_label(index)} holds hidden tests but has no id")
        if any(g.cell_id == cell_id for g in found):
            raise ValueError(f"{cell_label(index, cell_id)}: two graded cells share its id")
        lines = [
            line
            for line in cell.source.splitlines()
            if line.strip() not in (BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS)
        ]
        points = float(cell.get("metadata", {}).get("scalelab", {}).get("points", 1))
        found.append(GradedCell(cell_id, index, "\n".join(lines), points))
    return found


def grading_notebook(
    student: nbformat.NotebookNode,
    graded: Sequence[GradedCell],
    kernelspec: Mapping | None = None,
) -> tuple[nbformat.NotebookNode, list[str]]:
    """The notebook to run for ``student``'s submission (a copy; pure): each graded cell's
    source is the instructor's, outputs are cleared, and the kernel is ``kernelspec`` (the
    lab's: not one the student chose), when given. Returns it and the ids of graded cells the
    student's notebook lacks (deleted: they fail, with that reason)."""
    notebook = copy.deepcopy(student)
    if kernelspec:
        notebook.metadata["kernelspec"] = dict(kernelspec)
    by_id = {cell.get("id"): cell for cell in notebook.cells}
    missing = []
    for cell in graded:
        target = by_id.get(cell.cell_id)
        if target is None or target.cell_type != "code":
            missing.append(cell.cell_id)
            continue
        target.source = cell.source
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return notebook, missing


def _error_of(cell: Mapping) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename', 'Error')}: {output.get('evalue', '')}".strip()[:300]
    return None


def grade(
    executed: nbformat.NotebookNode,
    graded: Sequence[GradedCell],
    missing: Sequence[str],
    stop: Stop | None,
) -> list[CellGrade]:
    """Each graded cell's result in ``executed`` (the grading notebook after its run; pure).

    A cell passes when it ran (an execution count) without an error output. One after the
    ``stop`` never ran: it gets ``stop.reason``; so does the cell the run stopped in.
    """
    index_of = {cell.get("id"): i for i, cell in enumerate(executed.cells)}
    results = []
    for cell in graded:
        label = cell_label(cell.index, cell.cell_id)
        if cell.cell_id in missing:
            results.append(CellGrade(cell.cell_id, label, 0.0, cell.points, "the cell was deleted"))
            continue
        where = index_of[cell.cell_id]
        ran = executed.cells[where]
        if stop is not None and where >= stop.index:
            reason = stop.reason if where == stop.index else f"not run: {stop.reason}"
            results.append(CellGrade(cell.cell_id, label, 0.0, cell.points, reason))
            continue
        error = _error_of(ran)
        if error is None and ran.get("execution_count") is None:
            error = "not run"
        points = 0.0 if error else cell.points
        results.append(CellGrade(cell.cell_id, label, points, cell.points, error or ""))
    return results


def feedback_notebook(
    executed: nbformat.NotebookNode, grades: Sequence[CellGrade], lab: str
) -> nbformat.NotebookNode:
    """``executed`` with a first Markdown cell giving the grade and each graded cell's result,
    for the student (a copy; pure)."""
    earned = sum(g.points for g in grades)
    total = sum(g.of for g in grades)
    lines = [f"# Feedback: {lab}", "", f"**Autograded: {earned:g} of {total:g} points.**", ""]
    lines += ["| graded cell | points | why |", "| --- | --- | --- |"]
    for g in grades:
        why = g.reason.replace("|", "\\|").replace("\n", " ") or "passed"
        lines.append(f"| {g.label} | {g.points:g} / {g.of:g} | {why} |")
    lines += ["", "Questions answered in words are graded by your teaching assistants."]
    notebook = copy.deepcopy(executed)
    notebook.cells.insert(0, nbformat.v4.new_markdown_cell("\n".join(lines)))
    return notebook
