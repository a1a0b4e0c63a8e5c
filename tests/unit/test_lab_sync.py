"""Delivering labs into a home: new labs and versions in, a student's changes never lost."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest

from scalelab.hub_ext.labs.sync import MANIFEST, bundled_labs, sync_labs
from tests.unit.test_diskspace import tmpfs


def _lab(title: str, padding: int = 0) -> bytes:
    """A small released notebook whose content is ``title`` (and ``padding`` bytes of text)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {title}\n" + "x" * padding)]
    return (nbformat.writes(nb) + "\n").encode()


V1 = {"lab1.ipynb": _lab("lab 1, version 1"), "lab2.ipynb": _lab("lab 2, version 1")}
V2 = {"lab1.ipynb": _lab("lab 1, version 2"), "lab2.ipynb": _lab("lab 2, version 2")}


def _files(home: Path) -> set[str]:
    return {p.name for p in home.iterdir() if p.is_file()}


def test_first_sync_copies_every_lab_and_a_second_one_does_nothing(tmp_path: Path):
    report = sync_labs(tmp_path, V1)
    assert report.copied == ["lab1.ipynb", "lab2.ipynb"]
    assert report.messages == ["New lab: lab1.ipynb", "New lab: lab2.ipynb"]
    assert (tmp_path / "lab1.ipynb").read_bytes() == V1["lab1.ipynb"]
    assert _files(tmp_path) == {"lab1.ipynb", "lab2.ipynb"}  # no temporary file left
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["labs"]["lab1.ipynb"]["version"] == 1
    again = sync_labs(tmp_path, V1)
    assert again.copied == again.updated == again.beside == again.messages == []


def test_edit_then_new_release_keeps_the_edit_and_puts_the_new_version_beside(tmp_path: Path):
    sync_labs(tmp_path, V1)
    mine = nbformat.reads(V1["lab1.ipynb"].decode(), as_version=4)
    mine.cells.append(nbformat.v4.new_code_cell("my_answer = 42"))
    nbformat.write(mine, tmp_path / "lab1.ipynb")
    edited = (tmp_path / "lab1.ipynb").read_bytes()

    report = sync_labs(tmp_path, V2)
    assert (tmp_path / "lab1.ipynb").read_bytes() == edited  # the student's work, untouched
    assert report.beside == ["lab1 (v2).ipynb"]
    assert report.updated == ["lab2.ipynb"]  # not changed by the student: replaced in place
    assert (tmp_path / "lab2.ipynb").read_bytes() == V2["lab2.ipynb"]
    assert (
        "lab1.ipynb: you changed it, so it is kept as it is; version 2 is in "
        in (report.messages[0])
    )
    beside = nbformat.read(tmp_path / "lab1 (v2).ipynb", as_version=4)
    assert "Version 2 of this lab" in beside.cells[0].source  # what the student sees first
    assert beside.cells[1].source.strip() == "# lab 1, version 2"

    # A third release: the edit still wins, version 3 goes beside too; v2 is left alone.
    v3 = {"lab1.ipynb": _lab("lab 1, version 3")}
    assert sync_labs(tmp_path, v3).beside == ["lab1 (v3).ipynb"]
    assert (tmp_path / "lab1.ipynb").read_bytes() == edited
    assert (tmp_path / "lab1 (v2).ipynb").exists()
    assert sync_labs(tmp_path, v3).messages == []


def test_a_copy_from_before_manifests_is_kept_and_the_release_goes_beside(tmp_path: Path):
    (tmp_path / "lab1.ipynb").write_text("my own work")
    report = sync_labs(tmp_path, V1)
    assert report.copied == ["lab2.ipynb"] and report.beside == ["lab1 (v2).ipynb"]
    assert (tmp_path / "lab1.ipynb").read_text() == "my own work"


def test_deleted_and_renamed_labs_never_break_a_sync_and_return_only_as_new_versions(
    tmp_path: Path,
):
    sync_labs(tmp_path, V1)
    (tmp_path / "lab1.ipynb").unlink()
    (tmp_path / "lab2.ipynb").rename(tmp_path / "my lab 2.ipynb")
    (tmp_path / MANIFEST.parent / "stray").write_text("")  # extra files in .scalelab: ignored
    report = sync_labs(tmp_path, V1)
    assert report.messages == [] and _files(tmp_path) == {"my lab 2.ipynb"}  # not forced back

    report = sync_labs(tmp_path, V2)
    assert report.copied == ["lab1.ipynb", "lab2.ipynb"]
    assert report.messages == ["lab1.ipynb: version 2 copied in", "lab2.ipynb: version 2 copied in"]
    assert (tmp_path / "my lab 2.ipynb").read_bytes() == V1["lab2.ipynb"]  # renamed copy kept


def test_an_unreadable_manifest_never_costs_the_student_a_file(tmp_path: Path):
    sync_labs(tmp_path, V1)
    (tmp_path / "lab1.ipynb").write_text("edited")
    (tmp_path / MANIFEST).write_text("{not json")
    report = sync_labs(tmp_path, V2)
    assert (tmp_path / "lab1.ipynb").read_text() == "edited"
    assert (tmp_path / "lab2.ipynb").read_bytes() == V1["lab2.ipynb"]  # unknown origin: kept
    assert sorted(report.beside) == ["lab1 (v2).ipynb", "lab2 (v2).ipynb"]


class _DiskFull(io.BufferedWriter):
    """A file whose write stores half the bytes, then fails with ENOSPC (a simulated full disk;
    the real one is in the tmpfs test below)."""

    def write(self, data):
        super().write(bytes(data)[: len(data) // 2])
        super().flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _home_with_v1(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    sync_labs(home, V1)
    return home


def test_a_sync_interrupted_at_any_write_leaves_every_file_old_or_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    original = _home_with_v1(tmp_path)
    real_fdopen = os.fdopen
    failing_at = 0
    while True:
        failing_at += 1
        home = tmp_path / f"home-{failing_at}"
        shutil.copytree(original, home)
        writes = 0

        def fdopen(fd, mode="r", *args, _at=failing_at, **kwargs):
            nonlocal writes
            writes += 1
            if writes == _at and "w" in mode:
                return _DiskFull(io.FileIO(fd, "w"))
            return real_fdopen(fd, mode, *args, **kwargs)

        monkeypatch.setattr(os, "fdopen", fdopen)
        try:
            sync_labs(home, V2)
            interrupted = False
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            interrupted = True
        finally:
            monkeypatch.setattr(os, "fdopen", real_fdopen)
        for name in V1:
            assert (home / name).read_bytes() in (V1[name], V2[name]), (failing_at, name)
        assert not [p for p in home.rglob("*.part")], "a temporary file was left behind"
        json.loads((home / MANIFEST).read_text())  # the manifest too is old or new, never half
        # The next sync finishes the job, without mistaking a half-done sync for student edits.
        sync_labs(home, V2)
        assert {n: (home / n).read_bytes() for n in V2} == V2
        assert _files(home) == set(V2), failing_at
        if not interrupted:
            break
    assert failing_at > 4  # two labs and the manifest after each: every write point was hit


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A real 256 KiB tmpfs (needs root, as in CI's container; skipped elsewhere)."""
    with tmpfs(tmp_path / "tmpfs", "256k") as mount:
        yield mount


def test_a_full_disk_mid_sync_leaves_every_file_old_or_new(small_tmpfs: Path):
    home = small_tmpfs / "home"
    home.mkdir()
    sync_labs(home, V1)
    big = {name: _lab(f"{name}, version 2", padding=60_000) for name in V1}
    filler = small_tmpfs / "filler"
    with open(
        filler, "wb", buffering=0
    ) as out:  # fill the disk, then free room for about one new lab
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    os.truncate(filler, filler.stat().st_size - 90_000)
    with pytest.raises(OSError) as info:
        sync_labs(home, big)
    assert info.value.errno == errno.ENOSPC
    contents = [(home / name).read_bytes() for name in V1]
    assert all(c in (V1[n], big[n]) for c, n in zip(contents, V1, strict=True))
    assert not [p for p in home.rglob("*.part")]
    filler.unlink()
    sync_labs(home, big)
    assert {n: (home / n).read_bytes() for n in big} == big
    assert _files(home) == set(big)


def test_the_bundled_labs_are_the_released_student_versions():
    labs = bundled_labs()
    assert set(labs) == {
        "lab1_millionsong_regression.ipynb",
        "lab2_fashion_mnist_convnet.ipynb",
        "lab3_distributed_training.ipynb",
    }
    assert all(b"### BEGIN" not in content for content in labs.values())


def test_the_sync_command_delivers_from_a_release_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    from scalelab.cli import main

    released, home = tmp_path / "released", tmp_path / "home"
    released.mkdir()
    home.mkdir()
    for name, content in V1.items():
        (released / name).write_bytes(content)
    assert main(["labs", "sync", str(home), "--from", str(released)]) == 0
    assert capsys.readouterr().out.splitlines() == ["New lab: lab1.ipynb", "New lab: lab2.ipynb"]
    assert main(["labs", "sync", str(home), "--from", str(released)]) == 0
    assert "nothing new" in capsys.readouterr().out
    assert main(["labs", "sync", str(tmp_path / "nope")]) == 2
    assert "nope is not a folder" in capsys.readouterr().err


def _instructor_lab(marker: str) -> bytes:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# lab 3"),
        nbformat.v4.new_code_cell(f"x = 1\n{marker}\ny = 2\n{marker.replace('BEGIN', 'END')}"),
    ]
    nb.cells[1].id = "answer-cell"
    return (nbformat.writes(nb) + "\n").encode()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"{", "lab3.ipynb is not a valid notebook ("),
        (b"\xff\xfe", "lab3.ipynb is not a valid notebook ("),
        (b'{"cells": 3}', "lab3.ipynb is not a valid notebook ("),
        (
            _instructor_lab("### BEGIN SOLUTION"),
            "lab3.ipynb is an instructor notebook: cell 2 (id answer-cell) holds "
            "'### BEGIN SOLUTION'",
        ),
        (
            _instructor_lab("### BEGIN HIDDEN TESTS"),
            "lab3.ipynb is an instructor notebook: cell 2 (id answer-cell) holds "
            "'### BEGIN HIDDEN TESTS'",
        ),
    ],
)
def test_a_corrupt_or_instructor_notebook_is_refused_and_nothing_is_written_for_it(
    tmp_path: Path, content: bytes, expected: str
):
    report = sync_labs(tmp_path, {**V1, "lab3.ipynb": content})
    assert report.copied == ["lab1.ipynb", "lab2.ipynb"]
    assert report.refused == ["lab3.ipynb"]
    assert len(report.problems) == 1 and report.problems[0].startswith(expected)
    assert "scalelab labs release" in report.problems[0] and "\n" not in report.problems[0]
    assert "lab3" not in " ".join(report.messages)
    assert _files(tmp_path) == {"lab1.ipynb", "lab2.ipynb"}
    assert "lab3.ipynb" not in json.loads((tmp_path / MANIFEST).read_text())["labs"]


def test_the_sync_command_refuses_a_corrupt_or_instructor_notebook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    from scalelab.cli import main

    released, home = tmp_path / "released", tmp_path / "home"
    released.mkdir()
    home.mkdir()
    (released / "broken.ipynb").write_bytes(b"{")
    (released / "lab3.ipynb").write_bytes(_instructor_lab("### BEGIN SOLUTION"))
    assert main(["labs", "sync", str(home), "--from", str(released)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 2 and "Traceback" not in err
    assert lines[0].startswith(f"scalelab: error: {released}/broken.ipynb is not a valid notebook")
    assert lines[1].startswith(f"scalelab: error: {released}/lab3.ipynb is an instructor notebook")
    assert all("scalelab labs release" in line for line in lines)
    assert list(home.iterdir()) == []


def test_labs_from_scalelab_labs_dir_are_checked_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from scalelab.hub_ext.server.labs_handlers import lab_status

    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "lab1.ipynb").write_bytes(V1["lab1.ipynb"])
    (shared / "lab3.ipynb").write_bytes(_instructor_lab("### BEGIN HIDDEN TESTS"))
    monkeypatch.setenv("SCALELAB_LABS_DIR", str(shared))
    home = tmp_path / "home"
    home.mkdir()
    report = sync_labs(home)
    assert report.copied == ["lab1.ipynb"] and report.refused == ["lab3.ipynb"]
    assert _files(home) == {"lab1.ipynb"}
    assert [lab["name"] for lab in lab_status(str(home))] == ["lab1.ipynb"]
