"""`scalelab labs release`: solutions stubbed, hidden tests and outputs gone, tests kept."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from scalelab.cli import main
from scalelab.hub_ext.labs.release import MARKERS, ReleaseError, release, release_bytes
from tests.conftest import REPO

NOTEBOOKS = REPO / "notebooks"
SOURCES = sorted(NOTEBOOKS.glob("*.ipynb"))

SOLUTION_CELL = """\
def closed_form(X, y):
    \"\"\"Least squares.\"\"\"
    ### BEGIN SOLUTION
    secret_solution_line = np.linalg.lstsq(X, y)
    return secret_solution_line[0]
    ### END SOLUTION
"""
TEST_CELL = """\
assert closed_form(X, y).shape == (3,), "visible test"
### BEGIN HIDDEN TESTS
assert secret_hidden_check(closed_form(X, y))
### END HIDDEN TESTS
print("done")"""
MARKDOWN_CELL = "Why?\n### BEGIN SOLUTION\nsecret markdown answer\n### END SOLUTION"


def _instructor_notebook(folder: Path, name: str = "lab.ipynb") -> Path:
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell(SOLUTION_CELL, execution_count=3)
    code.outputs = [nbformat.v4.new_output("stream", text="secret output\n")]
    nb.cells = [
        code,
        nbformat.v4.new_code_cell(TEST_CELL),
        nbformat.v4.new_markdown_cell(MARKDOWN_CELL),
    ]
    path = folder / name
    nbformat.write(nb, path)
    return path


def test_release_stubs_solutions_removes_hidden_tests_and_outputs_keeps_visible_tests(
    tmp_path: Path,
):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    source = nbformat.read(_instructor_notebook(src), as_version=4)
    assert release(src, dest) == [dest / "lab.ipynb"]
    student = nbformat.read(dest / "lab.ipynb", as_version=4)
    nbformat.validate(student)
    text = (dest / "lab.ipynb").read_text()
    for secret in ("secret_solution_line", "secret_hidden_check", "secret markdown", "secret out"):
        assert secret not in text
    assert not any(marker in text for marker in MARKERS)
    code, tests, markdown = student.cells
    assert code.source == (
        'def closed_form(X, y):\n    """Least squares."""\n'
        "    # YOUR CODE HERE\n    raise NotImplementedError()"
    )
    assert code.outputs == [] and code.execution_count is None
    assert tests.source == ('assert closed_form(X, y).shape == (3,), "visible test"\nprint("done")')
    assert markdown.source == "Why?\nYOUR ANSWER HERE"
    assert [c.id for c in student.cells] == [c.id for c in source.cells]  # matched one for one


@pytest.mark.parametrize(
    ("cell", "problem"),
    [
        ("x = 1\n### END SOLUTION", "'### END SOLUTION' without '### BEGIN SOLUTION'"),
        ("### BEGIN SOLUTION\nx = 1", "'### BEGIN SOLUTION' is never closed"),
        ("### BEGIN HIDDEN TESTS\nassert x", "'### BEGIN HIDDEN TESTS' is never closed"),
        ("print('### BEGIN SOLUTION')", "is left in the text"),
    ],
)
def test_unbalanced_markers_are_refused_with_file_and_cell_named(tmp_path: Path, cell, problem):
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("ok = 1"), nbformat.v4.new_code_cell(cell)]
    )
    nb.cells[1].id = "the-bad-one"
    nbformat.write(nb, tmp_path / "bad.ipynb")
    with pytest.raises(ReleaseError, match=r"bad\.ipynb") as info:
        release_bytes(tmp_path / "bad.ipynb")
    assert problem in str(info.value)
    # Cells are counted from 1, as the notebook shows them, and named by id.
    assert "bad.ipynb: cell 2 (id the-bad-one): " in str(info.value)


def test_a_corrupt_notebook_is_refused_by_name_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    _instructor_notebook(src, "a_good.ipynb")
    (src / "b_broken.ipynb").write_text('{"cells": [')  # truncated JSON
    assert main(["labs", "release", str(src), str(dest)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("scalelab: error: ") and "b_broken.ipynb is not a valid notebook" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert not dest.exists()  # not even the good one

    # Valid JSON that is not a notebook is refused the same way.
    (src / "b_broken.ipynb").write_text(json.dumps({"cells": "no"}))
    assert main(["labs", "release", str(src), str(dest)]) == 2
    assert "b_broken.ipynb is not a valid notebook" in capsys.readouterr().err
    assert not dest.exists()


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_the_committed_student_versions_are_the_release_of_the_sources(source: Path):
    """notebooks/release/ is what is shipped; it must be rebuilt when a source changes:
    ``scalelab labs release notebooks notebooks/release``."""
    shipped = NOTEBOOKS / "release" / source.name
    assert shipped.read_bytes() == release_bytes(source), "re-run scalelab labs release"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_no_solution_text_survives_in_the_student_labs(source: Path):
    instructor = nbformat.read(source, as_version=4)
    student = nbformat.read(NOTEBOOKS / "release" / source.name, as_version=4)
    text = (NOTEBOOKS / "release" / source.name).read_text()
    assert not any(marker in text for marker in MARKERS)
    solutions = hidden = stubs = 0
    for ref, cell in zip(instructor.cells, student.cells, strict=True):
        for begin, end in (MARKERS[:2], MARKERS[2:]):
            region = ref.source.split(begin, 1)[1].split(end, 1)[0] if begin in ref.source else ""
            secret = [ln.strip() for ln in region.splitlines() if ln.strip()]
            for line in secret:
                if len(line) > 12 and not line.startswith("#"):  # substantive lines only
                    assert line not in cell.source, f"{line!r} survived in {source.name}"
            solutions += begin == MARKERS[0] and bool(secret)
            hidden += begin == MARKERS[2] and bool(secret)
        stubs += "raise NotImplementedError()" in cell.source
        # visible tests stay: every assert of the instructor's outside any region
        if ref.cell_type == "code" and not any(m in ref.source for m in MARKERS):
            assert cell.source == ref.source
    assert solutions >= 3 and stubs >= 3, "each lab has at least three exercises"
    assert hidden >= 1, "each lab has hidden tests"


def test_the_release_command_writes_the_student_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    _instructor_notebook(src)
    assert main(["labs", "release", str(src), str(dest)]) == 0
    assert capsys.readouterr().out.strip() == f"released {dest / 'lab.ipynb'}"
    assert "secret" not in (dest / "lab.ipynb").read_text()
    assert sorted(p.name for p in dest.iterdir()) == ["lab.ipynb"]  # no temporary file left
    assert main(["labs", "release", str(src), str(src)]) == 2
    assert "is the source folder" in capsys.readouterr().err


@pytest.mark.parametrize("dest", ["/proc/forbidden", "/proc/forbidden/deeper", "a_file/dest"])
def test_an_unwritable_dest_is_one_line_and_nothing_is_written(
    tmp_path: Path, dest: str, capsys: pytest.CaptureFixture[str]
):
    src = tmp_path / "src"
    src.mkdir()
    _instructor_notebook(src)
    (tmp_path / "a_file").write_text("not a folder")
    target = dest if dest.startswith("/") else str(tmp_path / dest)
    assert main(["labs", "release", str(src), target]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"scalelab: error: cannot write the student versions into {target} (")
    assert "give a folder you can write to" in err and "(nothing was written)" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert not Path(target).exists()


def test_a_write_failing_midway_leaves_nothing_in_dest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import scalelab.hub_ext.labs.release as release_module

    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    _instructor_notebook(src, "a.ipynb")
    _instructor_notebook(src, "b.ipynb")
    real_stage = release_module.stage_file

    def stage(target: Path, content: bytes) -> Path:
        if target.name == "b.ipynb":
            raise OSError(28, "No space left on device")
        return real_stage(target, content)

    monkeypatch.setattr(release_module, "stage_file", stage)
    with pytest.raises(ReleaseError, match=r"into .*dest \(No space left on device\)"):
        release(src, dest)
    assert list(dest.iterdir()) == []
