"""The course data sets: their files, known checksums and sources.

Checksums and sizes come from ``shared/data/README.md`` (provenance of the course's copies):
Fashion-MNIST is Zalando Research's release (MIT licence) as in upstream git commit ``b2617bb``;
the Million Song subset is the 6,724-row ``millionsong.txt`` of the BerkeleyX CS190 Spark ML lab.
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
    """

    name: str
    size: int
    sha256: str
    content_sha256: str | None = None


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
    """

    name: str
    mirror_dir: str
    files: tuple[FileSpec, ...]
    upstream: str
    debian_dir: str | None = None
    layout_version: int = 1


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

#: The data sets ``scalelab data fetch`` knows, by name.
DATASETS: dict[str, DatasetSpec] = {d.name: d for d in (FASHION_MNIST, MILLIONSONG)}
