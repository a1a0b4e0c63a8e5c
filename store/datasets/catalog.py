"""The course data sets: their files, known checksums and sources.

Checksums and sizes come from ``shared/data/README.md`` (provenance of the course's copies):
Fashion-MNIST is Zalando Research's release (MIT licence) as in upstream git commit ``b2617bb``;
the Million Song subset is the 6,724-row ``millionsong.txt`` of the BerkeleyX CS190 Spark ML lab.
The full UCI YearPredictionMSD (Lab 1's bonus) has no published checksum: its content is checked
against :class:`CsvTableSpec` instead (row count, fields a line, year range, finite features).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Where Debian's ``dataset-fashion-mnist`` package installs its files.
DEBIAN_DATASETS_DIR = "/usr/share/datasets"

_FASHION_UPSTREAM = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com"
_MILLIONSONG_UPSTREAM = (
    "https://raw.githubusercontent.com/o-alex/lab1/"
    "8682b1f589cd7c2fe00b0ef35e40948b5c07a879/src/main/resources"
)


@dataclass(frozen=True)
class FileSpec:
    """One original file of a data set.

    Attributes
    ----------
    name
        File name, e.g. ``"train-images-idx3-ubyte.gz"``.
    size
        Size of the upstream file in bytes.
    sha256
        SHA-256 (hex) of the upstream file's bytes.
    content_sha256
        For ``.gz`` files, SHA-256 of the decompressed bytes. Debian re-writes gzip headers, so a
        Debian copy differs from upstream in its compressed bytes but not in these; a file is
        accepted when its decompressed bytes match. None for files that are not compressed.
    aliases
        Other names of the same file in a mirror or Debian folder (an older upstream name).
    urls
        Upstream addresses tried in order after ``<upstream>/<name>`` (older addresses).

    ``size`` and ``sha256`` are None for a file without a published checksum; such a file is
    accepted on its content (see :class:`CsvTableSpec`), never unchecked.
    """

    name: str
    size: int | None
    sha256: str | None
    content_sha256: str | None = None
    aliases: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class CsvTableSpec:
    """The content rules of a headerless comma-separated table in a zip: year first, features.

    A file is accepted only when every rule holds; it is then written as Parquet shards of
    columns ``year`` and ``f01`` .. ``fNN`` (float64), one folder per split.

    Attributes
    ----------
    member
        Name of the text file inside the zip, e.g. ``"YearPredictionMSD.txt"``.
    rows
        Exact number of lines (rows) of the table.
    fields
        Numeric fields on every line, the year included (91: the year and 90 features).
    year_range
        Smallest and largest allowed year (inclusive); the year must be an integer.
    splits
        ``(split, rows)`` pairs: consecutive runs of rows, in file order, summing to ``rows``
        (UCI's train/test split of YearPredictionMSD: the first 463,715 rows, the last 51,630).
    rows_per_shard
        Most rows in one Parquet shard (50,000 rows x 91 float64 is about 36 MB).

    Raises
    ------
    ValueError
        The splits do not add up to ``rows``, or a figure is not positive.
    """

    member: str
    rows: int
    fields: int
    year_range: tuple[int, int]
    splits: tuple[tuple[str, int], ...]
    rows_per_shard: int = 50_000

    def __post_init__(self) -> None:
        if self.rows < 1 or self.fields < 2 or self.rows_per_shard < 1:
            raise ValueError(
                f"{self.member}: rows ({self.rows}), fields ({self.fields}) and rows_per_shard "
                f"({self.rows_per_shard}) must be positive, with at least 2 fields"
            )
        total = sum(count for _split, count in self.splits)
        if total != self.rows:
            raise ValueError(
                f"{self.member}: the splits {dict(self.splits)} add up to {total} rows, "
                f"not {self.rows}"
            )

    @property
    def feature_names(self) -> list[str]:
        """``["f01", ..., "fNN"]``: the feature columns, ``fields - 1`` of them."""
        width = max(2, len(str(self.fields - 1)))
        return [f"f{i:0{width}d}" for i in range(1, self.fields)]


@dataclass(frozen=True)
class DatasetSpec:
    """A course data set.

    Attributes
    ----------
    name
        Name in the store and on the command line (``datasets/<name>/`` in the store).
    mirror_dir
        Folder of the files inside a mirror (the layout of ``shared/data``).
    files
        The original files.
    upstream
        Base URL of the upstream files (``<upstream>/<file name>``).
    debian_dir
        Folder where a Debian package installs the files, or None.
    layout_version
        Version of the store layout written by ScaleLab; a store written by another version is
        rewritten by ``scalelab data fetch``.
    table
        Content rules of a data set whose single file is a zipped CSV table checked by content
        (see :class:`CsvTableSpec`); None for data sets with their own converter.
    """

    name: str
    mirror_dir: str
    files: tuple[FileSpec, ...]
    upstream: str
    debian_dir: str | None = None
    layout_version: int = 1
    table: CsvTableSpec | None = None

    def __post_init__(self) -> None:
        unchecked = [f.name for f in self.files if f.sha256 is None]
        if unchecked and (self.table is None or len(self.files) != 1):
            raise ValueError(
                f"{self.name}: {', '.join(unchecked)} has no SHA-256; a file without one must be "
                "the data set's only file, with content rules (table=CsvTableSpec(...))"
            )


FASHION_MNIST = DatasetSpec(
    name="fashion-mnist",
    mirror_dir="fashion_mnist",
    upstream=_FASHION_UPSTREAM,
    debian_dir=f"{DEBIAN_DATASETS_DIR}/fashion-mnist",
    files=(
        FileSpec(
            "train-images-idx3-ubyte.gz",
            26_421_880,
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        ),
        FileSpec(
            "train-labels-idx1-ubyte.gz",
            29_515,
            "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        ),
        FileSpec(
            "t10k-images-idx3-ubyte.gz",
            4_422_102,
            "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        ),
        FileSpec(
            "t10k-labels-idx1-ubyte.gz",
            5_148,
            "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
        ),
    ),
)

MILLIONSONG = DatasetSpec(
    name="millionsong",
    mirror_dir="millionsong",
    upstream=_MILLIONSONG_UPSTREAM,
    files=(
        FileSpec(
            "millionsong.txt",
            1_248_115,
            "5277c61e9337755b9556b1466601b78c67ecc8bfaeaa5b5658e7c70708048f24",
        ),
    ),
)

#: The full UCI YearPredictionMSD (Lab 1's bonus): 515,345 songs, the year and 90 features.
MSD_FULL = DatasetSpec(
    name="msd-full",
    mirror_dir="msd_full",
    upstream="https://archive.ics.uci.edu/static/public/203",
    files=(
        FileSpec(
            "yearpredictionmsd.zip",
            None,
            None,
            aliases=("YearPredictionMSD.txt.zip",),
            urls=(
                "https://archive.ics.uci.edu/ml/machine-learning-databases/00203/"
                "YearPredictionMSD.txt.zip",
            ),
        ),
    ),
    table=CsvTableSpec(
        member="YearPredictionMSD.txt",
        rows=515_345,
        fields=91,
        year_range=(1922, 2011),
        splits=(("train", 463_715), ("test", 51_630)),
    ),
)

#: The course data sets, which the labs need (``scalelab up`` names those missing), by name.
DATASETS: dict[str, DatasetSpec] = {d.name: d for d in (FASHION_MNIST, MILLIONSONG)}
#: Data sets fetched only on request (not reported missing by ``scalelab up``), by name.
OPTIONAL_DATASETS: dict[str, DatasetSpec] = {MSD_FULL.name: MSD_FULL}
#: Every data set ``scalelab data fetch`` can fetch: the course's and the optional ones.
ALL_DATASETS: dict[str, DatasetSpec] = {**DATASETS, **OPTIONAL_DATASETS}
