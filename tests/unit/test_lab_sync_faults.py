"""The labs' sync in a student's home survives malformed state (a clumsy-student drill).

Every fault here used to end in a 500 "Unhandled error" on the Course menu, "extension failed
loading" at server start or a traceback from ``scalelab labs sync``. Now: the malformed manifest
is set aside (``labs.json.bad-<timestamp>``) and rebuilt from the home, with one line for the
student; a folder where a lab should be gets the lab beside it; the 507 "free some space" answer
is kept for a full disk. After each fault every file the student had is checked byte for byte.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest

from scalelab.hub_ext.labs.sync import MANIFEST, sync_labs


def _lab(title: str) -> bytes:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {title}")]
    return (nbformat.writes(nb) + "\n").encode()


V1 = {"lab1.ipynb": _lab("lab 1, version 1"), "lab2.ipynb": _lab("lab 2, version 1")}
V2 = {"lab1.ipynb": _lab("lab 1, version 2"), "lab2.ipynb": _lab("lab 2, version 2")}
V3 = {"lab1.ipynb": _lab("lab 1, version 3"), "lab2.ipynb": _lab("lab 2, version 3")}
LOGGER = "scalelab.test.labs"


def _edit(path: Path) -> None:
    """What a student does to a lab: a new cell with an answer."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("my_answer = 42"))
    nbformat.write(nb, path)


def _worked_home(tmp_path: Path, folder: str = "home") -> Path:
    """A home after two releases: lab1 edited (so version 2 is beside it), lab2 updated."""
    home = tmp_path / folder
    home.mkdir()
    sync_labs(home, V1)
    _edit(home / "lab1.ipynb")
    report = sync_labs(home, V2)
    assert report.beside == ["lab1 (v2).ipynb"] and report.updated == ["lab2.ipynb"]
    (home / "notes").mkdir()
    (home / "notes" / "todo.txt").write_text("finish lab 1\n")
    return home


def _snapshot(home: Path) -> dict[str, bytes]:
    """Every regular file under ``home`` (links not followed): relative path -> bytes."""
    return {
        str(p.relative_to(home)): p.read_bytes()
        for p in sorted(home.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _student_files(home: Path) -> dict[str, bytes]:
    return {k: v for k, v in _snapshot(home).items() if not k.startswith(".scalelab")}


def _assert_kept(before: dict[str, bytes], home: Path) -> None:
    """Every file of ``before`` has its bytes at its path, or, for the manifest (or a
    ``.scalelab`` that is not a folder) that the sync set aside, at the ``*.bad-*`` name."""
    from scalelab.hub_ext.labs.sync import parse_manifest

    asides = [p for p in home.rglob("*") if ".bad-" in p.name]
    for rel, data in before.items():
        path = home / rel
        if path.is_file() and not path.is_symlink() and path.read_bytes() == data:
            continue
        if rel == str(MANIFEST) and parse_manifest(data)[1] == []:
            continue  # a well-formed manifest: ScaleLab's own file, rewritten by the sync
        moved = []
        for aside in asides:
            original = aside.with_name(aside.name.split(".bad-")[0]).relative_to(home)
            assert str(original) in (str(MANIFEST), ".scalelab"), aside  # nothing else moves
            if Path(rel) == original:
                moved.append(aside)
            elif original in Path(rel).parents:
                moved.append(aside / Path(rel).relative_to(original))
        assert any(p.is_file() and p.read_bytes() == data for p in moved), f"{rel} lost"


def _valid_manifest(home: Path) -> dict:
    return json.loads((home / MANIFEST).read_text())


def _rewrite(change: Callable[[dict], object]) -> Callable[[Path], None]:
    """A fault: the manifest, parsed, changed in place by ``change`` (what it returns is
    ignored) and written back as JSON."""

    def fault(home: Path) -> None:
        manifest = _valid_manifest(home)
        change(manifest)
        (home / MANIFEST).write_text(json.dumps(manifest))

    return fault


def _raw(data: bytes) -> Callable[[Path], None]:
    def fault(home: Path) -> None:
        (home / MANIFEST).write_bytes(data)

    return fault


def _lab1(key: str, value: object) -> Callable[[dict], None]:
    return lambda m: m["labs"]["lab1.ipynb"].__setitem__(key, value)


def _manifest_folder(home: Path) -> None:
    (home / MANIFEST).unlink()
    (home / MANIFEST).mkdir()
    (home / MANIFEST / "x.txt").write_text("a file in a folder named labs.json")


def _scalelab_file(home: Path) -> None:
    data = (home / MANIFEST).read_bytes()
    (home / MANIFEST).unlink()
    (home / MANIFEST.parent).rmdir()
    (home / MANIFEST.parent).write_bytes(data)


def _manifest_fifo(home: Path) -> None:
    (home / MANIFEST).unlink()
    os.mkfifo(home / MANIFEST)


def _manifest_broken_link(home: Path) -> None:
    (home / MANIFEST).unlink()
    (home / MANIFEST).symlink_to(home / "nowhere.json")


FAULTS = {
    "json-string": _raw(b'"labs"'),
    "json-list": _raw(b'[{"format": 1, "labs": {}, "files": {}}]'),
    "json-number": _raw(b"1"),
    "json-null": _raw(b"null"),
    "version-abc": _rewrite(_lab1("version", "abc")),
    "version-negative": _rewrite(_lab1("version", -3)),
    "version-bool": _rewrite(_lab1("version", True)),
    "version-float": _rewrite(_lab1("version", 1.5)),
    "version-huge": _rewrite(_lab1("version", 10**100)),
    "version-nan": _rewrite(_lab1("version", float("nan"))),
    "release-not-a-sha": _rewrite(_lab1("release", "zzz")),
    "release-a-list": _rewrite(_lab1("release", [])),
    "entry-missing-version": _rewrite(lambda m: m["labs"]["lab1.ipynb"].pop("version")),
    "entry-missing-release": _rewrite(lambda m: m["labs"]["lab1.ipynb"].pop("release")),
    "entry-a-string": _rewrite(lambda m: m["labs"].__setitem__("lab1.ipynb", "v2")),
    "entry-null": _rewrite(lambda m: m["labs"].__setitem__("lab1.ipynb", None)),
    "labs-a-list": _rewrite(lambda m: m.__setitem__("labs", ["lab1.ipynb"])),
    "files-a-string": _rewrite(lambda m: m.__setitem__("files", "lab1.ipynb")),
    "file-sha-a-number": _rewrite(lambda m: m["files"].__setitem__("lab2.ipynb", 3)),
    "missing-format": _rewrite(lambda m: m.pop("format")),
    "missing-labs": _rewrite(lambda m: m.pop("labs")),
    "missing-files": _rewrite(lambda m: m.pop("files")),
    "unknown-format": _rewrite(lambda m: m.__setitem__("format", 99)),
    "invalid-json": _raw(b"{not json"),
    "truncated": lambda home: (home / MANIFEST).write_bytes((home / MANIFEST).read_bytes()[:40]),
    "empty": _raw(b""),
    "binary-garbage": _raw(bytes(range(256)) * 64),
    "not-utf8": _raw(b'{"format": 1, "labs": {"\xff\xfe": {}}, "files": {}}'),
    "deeply-nested": _raw(b"[" * 200_000),
    "huge": _raw(b'{"format": 1, "labs": {}, "files": {}, "pad": "' + b"x" * (3 << 20) + b'"}'),
    "manifest-a-folder": _manifest_folder,
    "scalelab-a-file": _scalelab_file,
    "manifest-a-fifo": _manifest_fifo,
    "manifest-a-broken-link": _manifest_broken_link,
}


@pytest.mark.timeout(60)  # a FIFO opened for reading would block the sync forever
@pytest.mark.parametrize("fault", list(FAULTS), ids=list(FAULTS))
def test_a_malformed_manifest_is_set_aside_rebuilt_and_said_in_one_line(
    tmp_path: Path, fault: str, monkeypatch: pytest.MonkeyPatch
):
    home = _worked_home(tmp_path)
    FAULTS[fault](home)
    before = _snapshot(home)
    files_before = _student_files(home)

    report = sync_labs(home, V2)

    _assert_kept(before, home)
    assert _student_files(home) == files_before  # no new copy, nothing changed
    assert report.copied == report.updated == report.beside == report.refused == []
    assert len(report.warnings) == 1, report.warnings
    line = report.warnings[0]
    assert "\n" not in line and ".bad-" in line and "rebuilt" in line
    assert ("labs.json" in line) if fault != "scalelab-a-file" else (".scalelab" in line)
    if fault.startswith(("version-", "release-", "entry-")):
        assert "lab1.ipynb" in line  # which entry was wrong
    assert report.messages == report.warnings  # shown on the page, with the other messages
    asides = sorted(home.rglob("*.bad-*"))
    assert len(asides) == 1 and asides[0].name.split(".bad-")[1] in line

    from scalelab.hub_ext.labs.sync import parse_manifest

    assert parse_manifest((home / MANIFEST).read_bytes())[1] == []  # well-formed again
    again = sync_labs(home, V2)
    assert again.messages == again.warnings == []
    assert _student_files(home) == files_before

    # The rebuilt record is right: lab1 is the student's (version 3 goes beside it), lab2 is
    # ScaleLab's copy of version 2 (replaced in place).
    third = sync_labs(home, V3)
    assert third.beside == ["lab1 (v3).ipynb"] and third.updated == ["lab2.ipynb"]
    assert (home / "lab1.ipynb").read_bytes() == files_before["lab1.ipynb"]

    # The Course menu's page reads the same manifest: no 500, and nothing changed by reading.
    from scalelab.hub_ext.server.labs_handlers import lab_status

    monkeypatch.setenv("SCALELAB_LABS_DIR", str(_released(tmp_path, V3)))
    other = _worked_home(tmp_path, "home-2")
    FAULTS[fault](other)
    seen = _snapshot(other)
    assert [lab["name"] for lab in lab_status(str(other))] == ["lab1.ipynb", "lab2.ipynb"]
    assert _snapshot(other) == seen


@pytest.mark.parametrize("fault", ["json-string", "version-abc", "binary-garbage"])
def test_parse_manifest_never_raises_and_names_each_problem(tmp_path: Path, fault: str):
    from scalelab.hub_ext.labs.sync import parse_manifest, read_manifest

    home = _worked_home(tmp_path)
    FAULTS[fault](home)
    manifest, problems = parse_manifest((home / MANIFEST).read_bytes())
    assert set(manifest) == {"format", "labs", "files"} and len(problems) == 1
    assert read_manifest(home)["labs"] == manifest["labs"]
    if fault == "version-abc":
        assert "lab1.ipynb" not in manifest["labs"] and "lab2.ipynb" in manifest["labs"]


def test_a_manifest_set_aside_twice_in_one_second_keeps_both(tmp_path: Path):
    home = _worked_home(tmp_path)
    for garbage in (b"first", b"second"):
        (home / MANIFEST).write_bytes(garbage)
        assert len(sync_labs(home, V2).warnings) == 1
    kept = sorted(p.read_bytes() for p in (home / MANIFEST.parent).glob("labs.json.bad-*"))
    assert kept == [b"first", b"second"]


def test_a_lost_manifest_adds_no_copy_at_any_later_sync(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    sync_labs(home, V1)
    for name in V1:
        _edit(home / name)
    assert sorted(sync_labs(home, V2).beside) == ["lab1 (v2).ipynb", "lab2 (v2).ipynb"]
    files_before = _student_files(home)
    (home / MANIFEST).unlink()  # "what is this .scalelab thing?"

    first = sync_labs(home, V2)
    assert _student_files(home) == files_before  # no "(v2, 2)" copies
    assert first.copied == first.updated == first.beside == []
    assert len(first.warnings) == 1 and "labs.json" in first.warnings[0]
    assert "missing" in first.warnings[0] and "rebuilt" in first.warnings[0]
    second = sync_labs(home, V2)
    assert second.messages == second.warnings == []
    assert _student_files(home) == files_before
    assert sorted(sync_labs(home, V3).beside) == ["lab1 (v3).ipynb", "lab2 (v3).ipynb"]


def test_a_lost_manifest_in_a_home_of_untouched_labs_copies_nothing(tmp_path: Path):
    sync_labs(tmp_path, V1)
    (tmp_path / MANIFEST).unlink()
    report = sync_labs(tmp_path, V1)
    assert report.copied == report.beside == [] and len(report.warnings) == 1
    assert sync_labs(tmp_path, V2).updated == ["lab1.ipynb", "lab2.ipynb"]  # ScaleLab's copies


def _folder(home: Path, name: str) -> None:
    (home / name).mkdir()
    (home / name / "data.csv").write_text("1,2,3\n")


def _broken_link(home: Path, name: str) -> None:
    (home / name).symlink_to(home / "gone.ipynb")


def _fifo(home: Path, name: str) -> None:
    os.mkfifo(home / name)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("make", "kind"),
    [(_folder, "a folder"), (_broken_link, "a broken link"), (_fifo, "not a regular file")],
    ids=["folder", "broken-link", "fifo"],
)
def test_a_folder_named_like_a_lab_gets_the_lab_beside_it(
    tmp_path: Path, make: Callable[[Path, str], None], kind: str
):
    make(tmp_path, "lab1.ipynb")
    before = _snapshot(tmp_path)
    report = sync_labs(tmp_path, V1)
    assert report.copied == ["lab2.ipynb"] and report.beside == ["lab1 (v1).ipynb"]
    line = f"lab1.ipynb is {kind}; the lab was put beside it as lab1 (v1).ipynb"
    assert report.warnings == [line] and line in report.messages
    assert (tmp_path / "lab1 (v1).ipynb").read_bytes() == V1["lab1.ipynb"]
    after = _snapshot(tmp_path)
    assert after | before == after  # nothing over it
    inside = {k for k in after if k.startswith("lab1.ipynb/")}
    assert inside == {k for k in before if k.startswith("lab1.ipynb/")}  # nothing into it
    assert os.path.lexists(tmp_path / "lab1.ipynb") and not (tmp_path / "lab1.ipynb").is_file()
    again = sync_labs(tmp_path, V1)
    assert again.messages == again.warnings == []
    assert sync_labs(tmp_path, V2).beside == ["lab1 (v2).ipynb"]
    assert sorted(p.name for p in tmp_path.glob("lab1*")) == [
        "lab1 (v1).ipynb",
        "lab1 (v2).ipynb",
        "lab1.ipynb",
    ]


def test_a_folder_named_like_a_bundled_lab_is_no_disk_full(tmp_path: Path):
    from scalelab.hub_ext.server.labs_handlers import _sync

    name = "lab1_millionsong_regression.ipynb"
    _folder(tmp_path, name)
    report, status, error = asyncio.run(_sync(str(tmp_path), logging.getLogger(LOGGER)))
    assert status == 200 and error is None
    assert report.warnings == [
        f"{name} is a folder; the lab was put beside it as lab1_millionsong_regression (v1).ipynb"
    ]
    assert (tmp_path / name / "data.csv").read_text() == "1,2,3\n"
    assert report.as_dict()["warnings"] == report.warnings  # the API's JSON carries them
    assert [p.name for p in (tmp_path / name).iterdir()] == ["data.csv"]


def _raising(exc: BaseException):
    def sync_labs(*_args, **_kwargs):
        raise exc

    return sync_labs


@pytest.mark.parametrize(
    ("exc", "status", "full"),
    [
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), 507, True),
        (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), 507, True),
        (PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/home/a/x.ipynb"), 500, False),
        (IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), "/home/a/x"), 500, False),
        (RuntimeError("a bug"), 500, False),
    ],
    ids=["enospc", "edquot", "eacces", "eisdir", "bug"],
)
def test_the_handlers_say_free_some_space_only_for_a_full_disk(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    exc: BaseException,
    status: int,
    full: bool,
):
    from scalelab.hub_ext.server import labs_handlers

    monkeypatch.setattr(labs_handlers, "sync_labs", _raising(exc))
    report, got, error = asyncio.run(labs_handlers._sync(str(tmp_path), logging.getLogger(LOGGER)))
    assert report is None and got == status and error and "\n" not in error
    assert ("free some space" in error) == full
    assert error.endswith("free some space in your home and try again." if full else ".")
    if isinstance(exc, OSError):
        assert exc.strerror in error


def test_the_handlers_log_each_repair_as_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    from scalelab.hub_ext.server import labs_handlers

    home = _worked_home(tmp_path)
    FAULTS["json-string"](home)
    monkeypatch.setattr(labs_handlers, "sync_labs", lambda root: sync_labs(root, V2))
    with caplog.at_level(logging.WARNING, LOGGER):
        report, status, error = asyncio.run(
            labs_handlers._sync(str(home), logging.getLogger(LOGGER))
        )
    assert status == 200 and error is None and len(report.warnings) == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and report.warnings[0] in warnings[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]  # no traceback


@pytest.mark.parametrize(
    ("exc", "level"),
    [(None, logging.WARNING), (OSError(errno.ENOSPC, "No space left"), logging.ERROR)],
    ids=["malformed-manifest", "disk-full"],
)
def test_server_start_logs_a_line_and_never_fails_loading(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    exc: BaseException | None,
    level: int,
):
    from scalelab.hub_ext.server import extension

    home = _worked_home(tmp_path)
    FAULTS["version-abc"](home)
    fake = _raising(exc) if exc else (lambda root: sync_labs(root, V2))
    monkeypatch.setattr(extension, "sync_labs", fake)
    with caplog.at_level(logging.INFO, LOGGER):
        extension.deliver_labs(str(home), logging.getLogger(LOGGER))
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 1 and records[0].levelno == level and not records[0].exc_info
    assert "lab1.ipynb" in records[0].getMessage() or exc is not None


def test_server_start_survives_a_bug_in_the_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    from scalelab.hub_ext.server import extension

    monkeypatch.setattr(extension, "sync_labs", _raising(AttributeError("'str' has no 'get'")))
    with caplog.at_level(logging.INFO, LOGGER):
        extension.deliver_labs(str(tmp_path), logging.getLogger(LOGGER))  # does not raise
    assert [r.levelno for r in caplog.records] == [logging.ERROR]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scalelab", "labs", "sync", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _released(tmp_path: Path, labs: dict[str, bytes]) -> Path:
    folder = tmp_path / "released"
    folder.mkdir(exist_ok=True)
    for name, content in labs.items():
        (folder / name).write_bytes(content)
    return folder


@pytest.mark.parametrize("fault", ["json-string", "version-abc", "binary-garbage", "empty"])
def test_the_sync_command_prints_one_line_for_a_malformed_manifest(tmp_path: Path, fault: str):
    home = _worked_home(tmp_path)
    FAULTS[fault](home)
    before = _snapshot(home)
    result = _cli(str(home), "--from", str(_released(tmp_path, V2)))
    assert "Traceback" not in result.stderr + result.stdout
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("scalelab: warning: "), lines
    assert ".bad-" in lines[0]
    _assert_kept(before, home)


def test_the_sync_command_reports_a_folder_in_a_labs_place(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    _folder(home, "lab1.ipynb")
    result = _cli(str(home), "--from", str(_released(tmp_path, V1)))
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "scalelab: warning: lab1.ipynb is a folder; the lab was put beside it as lab1 (v1).ipynb"
    ]
    assert result.stdout.splitlines() == ["New lab: lab2.ipynb"]


def test_the_sync_command_that_cannot_finish_says_why_in_one_line_and_exits_1(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    result = _cli(str(home), env={"SCALELAB_LABS_DIR": str(tmp_path / "no-such-folder")})
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("scalelab: error: ")
    assert "no-such-folder" in lines[0]
