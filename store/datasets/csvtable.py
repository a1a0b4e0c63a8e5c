"""A zipped, headerless CSV table checked line by line and written as Parquet shards (``msd-full``).

How ``scalelab data fetch msd-full`` turns UCI's ``yearpredictionmsd.zip`` into the store's
layout: the first line breaking a rule of the catalogue's ``CsvTableSpec`` refuses the file
(:class:`ContentCheckError`); the zip is streamed into ``parquet/<split>/`` shards.
Why: docs/design-notes.md, scalelab.store.datasets.csvtable.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from pathlib import Path, PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from scalelab.store.datasets.catalog import CsvTableSpec
from scalelab.store.errors import ContentCheckError

#: Bytes of CSV text pyarrow parses at a time (about 1,250 YearPredictionMSD lines; larger blocks
#: cost resident memory that the allocator keeps: 8 MiB blocks peaked at 318 MiB, 1 MiB at 127).
BLOCK_BYTES = 1 << 20
#: Rows per Parquet row group of a shard (10,000 x 91 float64: about 7 MB in memory).
ROW_GROUP_ROWS = 10_000

_CONVERSION = re.compile(r"column #(\d+): Row #(\d+): .*invalid value '(.*)'", re.DOTALL)


def _number(value: float) -> str:
    """``2012``, ``1999.5``, ``nan``, ``inf``: a parsed field as a message shows it."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _member(archive: zipfile.ZipFile, table: CsvTableSpec, zip_name: str) -> zipfile.ZipInfo:
    """The zip entry named ``table.member`` (in any folder, macOS resource forks left out)."""
    found = [
        info
        for info in archive.infolist()
        if not info.is_dir()
        and PurePosixPath(info.filename).name == table.member
        and not info.filename.startswith("__MACOSX/")
    ]
    if len(found) != 1:
        names = ", ".join(i.filename for i in archive.infolist()) or "nothing"
        how = "no" if not found else "more than one"
        raise ContentCheckError(
            f"{zip_name} holds {how} {table.member} (it holds: {names}); "
            "it is not the data set's zip"
        )
    return found[0]


def _check_batch(batch: pa.RecordBatch, table: CsvTableSpec, first_line: int) -> str | None:
    """The first broken rule in ``batch`` (whose first row is line ``first_line``), or None."""
    lo, hi = table.year_range
    year = batch.column(0).to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        bad_year = ~((year == np.floor(year)) & (year >= lo) & (year <= hi))
    problems: list[tuple[int, int, str]] = []
    if bad_year.any():
        i = int(np.argmax(bad_year))
        problems.append(
            (i, 0, f"the year {_number(year[i])} is not an integer in {lo}..{hi} (rule: the year)")
        )
    for j, name in enumerate(table.feature_names, start=1):
        values = batch.column(j).to_numpy(zero_copy_only=False)
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            problems.append(
                (i, j, f"field {j + 1} ({name}) is {_number(values[i])} (rule: finite features)")
            )
    if not problems:
        return None
    i, _field, text = min(problems)
    return f"line {first_line + i}: {text}"


class _ShardWriter:
    """Cuts a stream of checked batches into splits, shards of at most ``rows_per_shard`` rows,
    and row groups of about :data:`ROW_GROUP_ROWS`: only one row group is held in memory."""

    def __init__(self, table: CsvTableSpec, out_dir: Path):
        self.table = table
        self.out_dir = out_dir
        self.plan = list(table.splits)
        self.split = 0  # index into plan
        self.in_split = 0  # rows given to the current split, pending included
        self.shard = 0  # number of the current shard within its split
        self.in_shard = 0  # rows given to the current shard, pending included
        self.writer: pq.ParquetWriter | None = None
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        start = 0
        while start < batch.num_rows:
            name, count = self.plan[self.split]
            take = min(
                batch.num_rows - start,
                count - self.in_split,
                self.table.rows_per_shard - self.in_shard,
            )
            self.pending.append(batch.slice(start, take))
            self.pending_rows += take
            self.in_split += take
            self.in_shard += take
            start += take
            shard_done = self.in_shard == self.table.rows_per_shard or self.in_split == count
            if shard_done or self.pending_rows >= ROW_GROUP_ROWS:
                self._write_row_group(name)
            if shard_done:
                self.close()
                self.shard, self.in_shard = self.shard + 1, 0
            if self.in_split == count and self.split + 1 < len(self.plan):
                self.split, self.in_split, self.shard = self.split + 1, 0, 0

    def _write_row_group(self, split: str) -> None:
        if self.writer is None:
            folder = self.out_dir / "parquet" / split
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"part-{self.shard:05d}.parquet"
            self.writer = pq.ParquetWriter(path, self.pending[0].schema)
        self.writer.write_table(pa.Table.from_batches(self.pending).combine_chunks())
        self.pending, self.pending_rows = [], 0

    def close(self) -> None:
        """Close the open shard (the last one is complete; after a refusal, it is thrown away)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def convert_csv_zip(zip_path: str | Path, table: CsvTableSpec, out_dir: str | Path) -> dict:
    """Check the table in ``zip_path`` against ``table`` and write it as Parquet shards.

    Parameters
    ----------
    zip_path
        The zip file (e.g. UCI's ``yearpredictionmsd.zip``, about 211 MB, 430 MB of text).
    table
        The content rules and the split (:class:`~scalelab.store.datasets.catalog.CsvTableSpec`).
    out_dir
        Where ``parquet/<split>/part-NNNNN.parquet`` go (a staging folder: on a refusal, what
        was written there is incomplete and must be thrown away).

    Returns
    -------
    dict
        Rows written per split, in file order: ``{"train": 463715, "test": 51630}`` for
        YearPredictionMSD.

    Raises
    ------
    ContentCheckError
        The zip is unreadable or truncated, lacks the member, or a line breaks a rule; the
        message names the file, the line and the rule.
    """
    zip_path, out_dir = Path(zip_path), Path(out_dir)
    names = ["year", *table.feature_names]
    where = f"{table.member} in {zip_path.name}"
    try:
        archive = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ContentCheckError(
            f"{zip_path.name} is not a readable zip file ({exc}): a truncated or interrupted "
            "download?"
        ) from None
    bad_rows: list[str] = []

    def wrong_field_count(row: pacsv.InvalidRow) -> str:
        bad_rows.append(
            f"line {row.number}: {row.actual_columns} field(s), expected {table.fields} "
            f"(rule: {table.fields} numeric fields a line)"
        )
        return "error"

    writer = _ShardWriter(table, out_dir)
    seen = 0
    with archive, archive.open(_member(archive, table, zip_path.name)) as text:
        try:
            reader = pacsv.open_csv(
                text,
                read_options=pacsv.ReadOptions(
                    column_names=names, block_size=BLOCK_BYTES, use_threads=False
                ),
                parse_options=pacsv.ParseOptions(
                    quote_char=False,
                    ignore_empty_lines=False,
                    invalid_row_handler=wrong_field_count,
                ),
                convert_options=pacsv.ConvertOptions(
                    column_types=dict.fromkeys(names, pa.float64()),
                    null_values=[],
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
            for batch in reader:
                if seen + batch.num_rows > table.rows:
                    raise ContentCheckError(
                        f"{where}: line {table.rows + 1}: more than {table.rows:,} lines "
                        f"(rule: exactly {table.rows:,} lines)"
                    )
                problem = _check_batch(batch, table, seen + 1)
                if problem:
                    raise ContentCheckError(f"{where}: {problem}")
                writer.write(batch)
                seen += batch.num_rows
        except pa.ArrowInvalid as exc:
            raise ContentCheckError(f"{where}: {_parse_problem(exc, bad_rows, table)}") from None
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
            raise ContentCheckError(
                f"{where}: the zip is damaged ({exc}) after {seen:,} good lines: a truncated or "
                "corrupt download?"
            ) from None
        finally:
            writer.close()
    if seen < table.rows:
        raise ContentCheckError(
            f"{where}: the file ends after line {seen:,}, expected {table.rows:,} lines "
            f"(rule: exactly {table.rows:,} lines): a truncated file?"
        )
    return {name: count for name, count in table.splits}


def _parse_problem(exc: pa.ArrowInvalid, bad_rows: list[str], table: CsvTableSpec) -> str:
    """The line and rule behind one of pyarrow's CSV errors."""
    if bad_rows:
        return bad_rows[0]
    message = str(exc)
    found = _CONVERSION.search(message)
    if found:
        column, line, value = int(found[1]), int(found[2]), found[3]
        what = "an empty field" if value == "" else f"{value!r}"
        return (
            f"line {line}: field {column + 1} is {what}, not a number "
            f"(rule: {table.fields} numeric fields a line)"
        )
    if "Empty CSV file" in message:
        return f"the file is empty (rule: exactly {table.rows:,} lines)"
    return f"not a comma-separated table of numbers ({message})"
