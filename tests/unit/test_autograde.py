"""Autograding's pure parts (issue 33, Must 3): graded cells, the notebook a submission is
graded as, grades from an executed notebook and the feedback. The sandboxed runs are in
``tests/integration/hub/test_autograde.py``."""

from __future__ import annotations

import nbformat
import pytest

from scalelab.hub_ext.labs.autograde import (
    Stop,
    feedback_notebook,
    grade,
    graded_cells,
    grading_notebook,
)


def _code(cell_id: str, source: str, **metadata) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, metadata=metadata)
    cell.id = cell_id
    return cell


TESTS = "assert f() == 1\n### BEGIN HIDDEN TESTS\nassert f() != 2\n### END HIDDEN TESTS"


def _lab() -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(
        cells=[
            _code("answer", "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
            _code("visible", "assert f() == 1"),  # no hidden tests: not graded
            _code("tests", TESTS),
            _code("more", TESTS.replace("f()", "f() + 0"), scalelab={"points": 2.5}),
        ]
    )


def test_graded_cells_are_the_ones_with_hidden_tests_without_their_markers():
    graded = graded_cells(_lab())
    assert [(g.cell_id, g.index, g.points) for g in graded] == [("tests", 2, 1.0), ("more", 3, 2.5)]
    assert graded[0].source == "assert f() == 1\nassert f() != 2"


def test_a_graded_cell_needs_a_unique_id():
    lab = _lab()
    lab.cells[3].id = "tests"
    with pytest.raises(ValueError, match="two graded cells share its id"):
        graded_cells(lab)
    del lab.cells[2]["id"]
    with pytest.raises(ValueError, match="cell 3 holds hidden tests but has no id"):
        graded_cells(lab)


def test_the_grading_notebook_has_the_instructor_s_tests_and_no_outputs():
    student = _lab()
    student.cells[2].source = "pass  # tests 'fixed' by the student"
    student.cells[0].outputs = [nbformat.v4.new_output("stream", text="old")]
    student.cells[0].execution_count = 7
    del student.cells[3]  # deleted by the student
    notebook, missing = grading_notebook(student, graded_cells(_lab()))
    assert notebook.cells[2].source == "assert f() == 1\nassert f() != 2"
    assert missing == ["more"]
    assert notebook.cells[0].outputs == [] and notebook.cells[0].execution_count is None
    assert student.cells[2].source.startswith("pass")  # the submission itself is untouched


def _ran(notebook: nbformat.NotebookNode, upto: int, error_at: int | None = None):
    for index, cell in enumerate(notebook.cells[:upto]):
        cell.execution_count = index + 1
        if index == error_at:
            cell.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="")]
    return notebook


def test_grades_pass_fail_deleted_and_not_run():
    graded = graded_cells(_lab())
    notebook, _ = grading_notebook(_lab(), graded)
    passed = grade(_ran(notebook, 4), graded, [], None)
    assert [(g.points, g.of, g.reason) for g in passed] == [(1.0, 1.0, ""), (2.5, 2.5, "")]
    notebook, _ = grading_notebook(_lab(), graded)
    failed = grade(_ran(notebook, 4, error_at=2), graded, ["more"], None)
    assert [(g.points, g.reason) for g in failed] == [
        (0.0, "AssertionError:"),
        (0.0, "the cell was deleted"),
    ]
    notebook, _ = grading_notebook(_lab(), graded)
    stopped = grade(_ran(notebook, 2), graded, [], Stop(1, "timed out, in cell 2"))
    assert [g.reason for g in stopped] == ["not run: timed out, in cell 2"] * 2
    notebook, _ = grading_notebook(_lab(), graded)
    in_test = grade(_ran(notebook, 3), graded, [], Stop(2, "the kernel died, in cell 3"))
    assert [g.reason for g in in_test] == [
        "the kernel died, in cell 3",
        "not run: the kernel died, in cell 3",
    ]
    notebook, _ = grading_notebook(_lab(), graded)
    assert grade(_ran(notebook, 3), graded, [], None)[1].reason == "not run"


def test_the_feedback_opens_with_the_grade_and_each_cell_s_result():
    graded = graded_cells(_lab())
    notebook, _ = grading_notebook(_lab(), graded)
    executed = _ran(notebook, 4, error_at=3)
    executed.cells[3].outputs[0]["evalue"] = "a | b"
    feedback = feedback_notebook(executed, grade(executed, graded, [], None), "lab9")
    first = feedback.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# Feedback: lab9")
    assert "**Autograded: 1 of 3.5 points.**" in first.source
    assert "| cell 3 (id tests) | 1 / 1 | passed |" in first.source
    assert "| cell 4 (id more) | 0 / 2.5 | AssertionError: a \\| b |" in first.source
    assert len(feedback.cells) == len(executed.cells) + 1


def test_a_run_s_result_written_in_the_sandbox_is_checked(tmp_path):
    from scalelab.commands.autograde import MAX_EXECUTED_BYTES, read_executed, read_stop

    stop = tmp_path / "stop.json"
    assert read_stop(stop)["reason"].startswith("the run ended without its result")
    stop.write_text("null")
    assert read_stop(stop) is None
    stop.write_text('{"reason": "timed out", "index": 3}')
    assert read_stop(stop) == {"reason": "timed out", "index": 3}
    for forged in ("forged", '{"reason": 5}', '{"reason": "x", "index": "9"}', "[1]"):
        stop.write_text(forged)
        assert "unreadable" in read_stop(stop)["reason"], forged

    ran = _lab()
    path = tmp_path / "executed.ipynb"
    assert read_executed(path, ran) == (ran, None)  # none written: nothing ran
    nbformat.write(ran, path)
    assert read_executed(path, ran)[1] is None
    other = _lab()
    other.cells[0].id = "something-else"
    nbformat.write(other, path)
    assert read_executed(path, ran) == (
        ran,
        "the run's notebook is not the one that ran (its cells differ)",
    )
    path.write_text("forged")
    assert read_executed(path, ran)[1].startswith("the run's notebook was unreadable")
    with path.open("wb") as handle:
        handle.truncate(MAX_EXECUTED_BYTES + 1)
    assert "over 256 MiB" in read_executed(path, ran)[1]
