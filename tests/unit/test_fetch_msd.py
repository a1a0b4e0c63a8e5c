"""``scalelab data fetch msd-full``: the full UCI YearPredictionMSD, checked by its content.

Nothing real is downloaded: a synthetic zip of the right format (year + 90 features, few rows) is
served by a real HTTP server on loopback (tests/support/httpstore.py) or put in a mirror folder, and
fetched through the real fetch code with a small catalogue entry built from the real one
(``dataclasses.replace``: same file names, same rules, fewer rows).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from scalelab.cli import main
from scalelab.store import (
    ALL_DATASETS,
    DATASETS,
    ContentCheckError,
    CsvTableSpec,
    DataSourceError,
    fetch_dataset,
    missing_datasets,
    open_store,
)
from scalelab.store.datasets.catalog import MSD_FULL
from tests.support.httpstore import http_folder
from tests.support.msdzip import csv_lines, small_entry, synthetic_rows, write_zip

ROWS, TRAIN, TEST = 30, 24, 6
ZIP_NAME = MSD_FULL.files[0].name  # yearpredictionmsd.zip
OLD_ZIP_NAME = MSD_FULL.files[0].aliases[0]  # YearPredictionMSD.txt.zip


def test_the_default_entry_holds_the_uci_figures():
    table = MSD_FULL.table
    assert MSD_FULL.name == "msd-full"
    assert table.rows == 515_345
    assert dict(table.splits) == {"train": 463_715, "test": 51_630}
    assert [name for name, _ in table.splits] == ["train", "test"]  # the first rows train
    assert table.fields == 91
    assert table.feature_names == [f"f{i:02d}" for i in range(1, 91)]
    assert table.year_range == (1922, 2011)
    assert table.member == "YearPredictionMSD.txt"
    file = MSD_FULL.files[0]
    assert file.sha256 is None  # no published checksum: the content is checked instead
    assert f"{MSD_FULL.upstream}/{file.name}" == (
        "https://archive.ics.uci.edu/static/public/203/yearpredictionmsd.zip"
    )
    assert file.urls == (
        "https://archive.ics.uci.edu/ml/machine-learning-databases/00203/YearPredictionMSD.txt.zip",
    )
    # Optional: `scalelab data fetch` knows it, `scalelab up` does not ask for it.
    assert ALL_DATASETS["msd-full"] is MSD_FULL and "msd-full" not in DATASETS


def test_splits_that_do_not_add_up_are_refused():
    with pytest.raises(ValueError, match=r"add up to 10 rows, not 12"):
        CsvTableSpec(member="x.txt", rows=12, fields=3, year_range=(1, 2), splits=(("a", 10),))


def test_a_file_without_checksum_needs_content_rules():
    with pytest.raises(
        ValueError, match=r"yearpredictionmsd\.zip has no SHA-256; .* content rules"
    ):
        replace(MSD_FULL, table=None)


def test_fetch_over_http_checks_the_content_and_writes_the_uci_split(tmp_path: Path):
    rows = synthetic_rows()
    served = tmp_path / "served"
    # Only the older address has the file: the current one answers 404, the next is tried.
    write_zip(served / "old" / OLD_ZIP_NAME, csv_lines(rows))
    fs = open_store((tmp_path / "store").as_uri())
    lines: list[str] = []
    with http_folder(served) as base:
        spec = small_entry(f"{base}/static", urls=(f"{base}/old/{OLD_ZIP_NAME}",))
        assert fetch_dataset(spec, fs, log=lines.append)
    assert f"  {ZIP_NAME}: downloading {base}/static/{ZIP_NAME}" in lines
    assert f"  {ZIP_NAME}: downloading {base}/old/{OLD_ZIP_NAME}" in lines
    assert any("no published checksum" in line and "from the upstream" in line for line in lines)
    assert lines[-1] == "msd-full: written to datasets/msd-full/ (train: 24 rows, test: 6 rows)"

    root = tmp_path / "store" / "datasets" / "msd-full"
    train = pq.read_table(root / "parquet" / "train")
    test = pq.read_table(root / "parquet" / "test")
    assert len(list((root / "parquet" / "train").iterdir())) == 3  # 10 + 10 + 4 rows
    assert train.column_names == ["year", *[f"f{i:02d}" for i in range(1, 91)]]
    assert train.num_rows == TRAIN and test.num_rows == TEST
    # The UCI split: the first rows train, the last test, in file order, values exact.
    got = np.vstack([train.to_pandas().to_numpy(), test.to_pandas().to_numpy()])
    np.testing.assert_array_equal(got, rows)
    manifest = json.loads((root / "MANIFEST.json").read_text())
    assert manifest["rows"] == {"train": TRAIN, "test": TEST}
    assert f"raw/{ZIP_NAME}" in manifest["files"]  # the original, under its current name
    assert not (tmp_path / "store" / "datasets" / ".staging").exists()

    before = sorted(p.stat().st_mtime_ns for p in root.rglob("*"))
    again: list[str] = []
    assert not fetch_dataset(spec, fs, log=again.append)  # a re-run does nothing
    assert again == ["msd-full: already in the store at datasets/msd-full/, nothing to do"]
    assert sorted(p.stat().st_mtime_ns for p in root.rglob("*")) == before


def _bad(lines: list[str], line: int, text: str) -> list[str]:
    return [*lines[: line - 1], text, *lines[line:]]


GOOD = csv_lines(synthetic_rows())
BAD_CONTENT = {
    "wrong field count": (
        _bad(GOOD, 7, GOOD[6].rsplit(",", 1)[0]),
        r"line 7: 90 field\(s\), expected 91 \(rule: 91 numeric fields a line\)",
    ),
    "a field that is not a number": (
        _bad(GOOD, 7, GOOD[6].replace(",", ",abc,", 1).rsplit(",", 1)[0]),
        r"line 7: field 2 is 'abc', not a number \(rule: 91 numeric fields a line\)",
    ),
    "an empty field": (
        _bad(GOOD, 12, GOOD[11].replace(",", ",,", 1).rsplit(",", 1)[0]),
        r"line 12: field 2 is an empty field, not a number",
    ),
    "year after 2011": (
        _bad(GOOD, 5, "2012" + GOOD[4][4:]),
        r"line 5: the year 2012 is not an integer in 1922\.\.2011 \(rule: the year\)",
    ),
    "year before 1922": (
        _bad(GOOD, 30, "1921" + GOOD[29][4:]),
        r"line 30: the year 1921 is not an integer in 1922\.\.2011",
    ),
    "year not an integer": (
        _bad(GOOD, 3, "1999.5" + GOOD[2][4:]),
        r"line 3: the year 1999\.5 is not an integer",
    ),
    "a feature not finite": (
        _bad(GOOD, 9, GOOD[8].rsplit(",", 1)[0] + ",nan"),
        r"line 9: field 91 \(f90\) is nan \(rule: finite features\)",
    ),
    "a feature too large for a float": (
        _bad(GOOD, 9, GOOD[8].replace(",", ",1e400,", 1).rsplit(",", 1)[0]),
        r"line 9: field 2 \(f01\) is inf \(rule: finite features\)",
    ),
    "truncated at a line end": (
        GOOD[:20],
        r"the file ends after line 20, expected 30 lines \(rule: exactly 30 lines\)",
    ),
    "truncated in the middle of a line": (
        [*GOOD[:19], GOOD[19][:200]],
        r"line 20: \d+ field\(s\), expected 91",
    ),
    "more rows than the data set has": (
        GOOD + GOOD[:2],
        r"line 31: more than 30 lines \(rule: exactly 30 lines\)",
    ),
    "an empty line": (_bad(GOOD, 4, ""), r"line 4: "),
}


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    return tmp_path / "mirror"


@pytest.mark.parametrize("kind", list(BAD_CONTENT))
def test_bad_content_is_refused_naming_file_line_and_rule(kind: str, tmp_path: Path, mirror: Path):
    lines, expected = BAD_CONTENT[kind]
    write_zip(mirror / MSD_FULL.mirror_dir / ZIP_NAME, lines)
    fs = open_store((tmp_path / "store").as_uri())
    with pytest.raises(ContentCheckError, match=expected) as info:
        fetch_dataset(small_entry(), fs, mirror=mirror, log=lambda _: None, download=False)
    message = str(info.value)
    assert message.startswith(
        f"refused msd_full/{ZIP_NAME} from the mirror ({mirror}/msd_full/{ZIP_NAME}): "
        f"YearPredictionMSD.txt in {ZIP_NAME}: "
    )
    assert "Nothing was written to the store" in message
    assert list((tmp_path / "store").rglob("*")) == []


def test_a_truncated_zip_is_refused(tmp_path: Path, mirror: Path):
    path = write_zip(mirror / MSD_FULL.mirror_dir / OLD_ZIP_NAME, GOOD)  # the older name
    path.write_bytes(path.read_bytes()[:-300])  # an interrupted download
    fs = open_store((tmp_path / "store").as_uri())
    with pytest.raises(ContentCheckError, match=r"is not a readable zip file .*truncated"):
        fetch_dataset(small_entry(), fs, mirror=mirror, log=lambda _: None, download=False)
    assert list((tmp_path / "store").rglob("*")) == []


def test_damaged_compressed_bytes_are_refused(tmp_path: Path, mirror: Path):
    path = write_zip(mirror / MSD_FULL.mirror_dir / ZIP_NAME, GOOD)
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the deflate stream: CRC or inflate fails
    path.write_bytes(bytes(data))
    fs = open_store((tmp_path / "store").as_uri())
    with pytest.raises(
        ContentCheckError, match=r"YearPredictionMSD\.txt in yearpredictionmsd\.zip"
    ):
        fetch_dataset(small_entry(), fs, mirror=mirror, log=lambda _: None, download=False)
    assert list((tmp_path / "store").rglob("*")) == []


def test_a_zip_without_the_table_is_refused(tmp_path: Path, mirror: Path):
    write_zip(mirror / MSD_FULL.mirror_dir / ZIP_NAME, GOOD, member="other.csv")
    fs = open_store((tmp_path / "store").as_uri())
    with pytest.raises(ContentCheckError, match=r"holds no YearPredictionMSD\.txt \(it holds: "):
        fetch_dataset(small_entry(), fs, mirror=mirror, log=lambda _: None, download=False)


def test_the_command_checks_against_the_full_entry_and_says_what_is_wrong(
    tmp_path: Path, mirror: Path, capsys: pytest.CaptureFixture[str]
):
    # The command uses the real entry: a 30-row file is not the 515,345-row data set.
    write_zip(mirror / MSD_FULL.mirror_dir / ZIP_NAME, GOOD)
    store = (tmp_path / "store").as_uri()
    argv = ["data", "fetch", "msd-full", "--mirror", str(mirror), "--store", store]
    assert main([*argv, "--no-download"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"scalelab: error: refused msd_full/{ZIP_NAME} from the mirror")
    assert "the file ends after line 30, expected 515,345 lines" in err
    assert "Traceback" not in err and err.count("\n") == 1
    fs = open_store(store)
    assert not fs.exists("datasets/msd-full")
    assert "msd-full" not in missing_datasets(fs)  # optional: never reported missing


def test_no_source_lists_every_address_tried(tmp_path: Path, mirror: Path):
    mirror.mkdir()
    store = (tmp_path / "store").as_uri()
    with http_folder(tmp_path) as base:  # serves nothing under /static or /old
        spec = small_entry(f"{base}/static", urls=(f"{base}/old/{OLD_ZIP_NAME}",))
        with pytest.raises(DataSourceError) as info:
            fetch_dataset(spec, open_store(store), mirror=mirror, log=lambda _: None)
    message = str(info.value)
    assert f"mirror: no file at {mirror}/msd_full/{ZIP_NAME}" in message
    assert f"mirror: no file at {mirror}/msd_full/{OLD_ZIP_NAME}" in message
    assert f"upstream: {base}/static/{ZIP_NAME} failed (HTTP Error 404" in message
    assert f"upstream: {base}/old/{OLD_ZIP_NAME} failed (HTTP Error 404" in message
