"""``scalelab data fetch``: put the course data sets into the store, checked and complete.

Sources in order (a mirror, the Debian package's folder, upstream), every file checked (SHA-256,
or its content); ``datasets/<name>/MANIFEST.json`` marks a complete data set (:func:`is_present`,
:func:`missing_datasets`), published whole, or with the manifest last on object stores.
Why: docs/design-notes.md, scalelab.store.datasets.fetch.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import tempfile
import urllib.error
import urllib.request
import uuid
import zlib
from collections.abc import Callable
from pathlib import Path

from fsspec import AbstractFileSystem
from fsspec.implementations.dirfs import DirFileSystem

from scalelab.common.diskspace import format_bytes, full_disk_message, is_disk_full
from scalelab.store import protocols
from scalelab.store.datasets.catalog import DATASETS, DatasetSpec, FileSpec
from scalelab.store.datasets.csvtable import convert_csv_zip
from scalelab.store.datasets.shards import CONVERTERS, iter_files
from scalelab.store.errors import (
    ChecksumError,
    ContentCheckError,
    DataSourceError,
    StoreFullError,
    full_disk_failure,
)

#: Name of the file that marks a complete data set in the store.
MANIFEST = "MANIFEST.json"
#: Where a local store stages a data set before renaming it into place.
STAGING = "datasets/.staging"
#: Seconds to wait for an upstream server before trying the next source.
DOWNLOAD_TIMEOUT_S = 30
_CHUNK = 1 << 20


def dataset_dir(spec: DatasetSpec) -> str:
    """Store path of a data set: ``datasets/<name>``."""
    return f"datasets/{spec.name}"


def is_present(fs: AbstractFileSystem, spec: DatasetSpec) -> bool:
    """True when the store holds the complete current layout of ``spec`` (manifest and files)."""
    path = f"{dataset_dir(spec)}/{MANIFEST}"
    if not fs.exists(path):
        return False
    try:
        manifest = json.loads(fs.cat_file(path))
    except (ValueError, OSError):
        return False
    if manifest.get("layout_version") != spec.layout_version:
        return False
    return all(fs.exists(f"{dataset_dir(spec)}/{rel}") for rel in manifest.get("files", {}))


def missing_datasets(fs: AbstractFileSystem) -> list[str]:
    """Names of the course data sets that the store lacks (or holds incomplete)."""
    return [name for name, spec in DATASETS.items() if not is_present(fs, spec)]


def sha256_file(path: Path, *, decompress: bool = False) -> str:
    """SHA-256 (hex) of a file's bytes, or of its gzip-decompressed bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    opener = gzip.open if decompress else open
    with opener(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: Path, spec: FileSpec) -> None:
    """Check a file against its known SHA-256.

    A file passes when its bytes match the upstream SHA-256, or, for ``.gz`` files, when its
    decompressed bytes match ``spec.content_sha256`` (Debian rewrites gzip headers).

    A file without a published checksum (``spec.sha256`` None) passes here: its content is
    checked when it is converted (see :class:`~scalelab.store.datasets.catalog.CsvTableSpec`).

    Raises
    ------
    ChecksumError
        Neither matches; the message gives the expected and actual digests.
    """
    if spec.sha256 is None:
        return
    actual = sha256_file(path)
    if actual == spec.sha256:
        return
    detail = f"its SHA-256 is {actual}, expected {spec.sha256}"
    if spec.content_sha256:
        try:
            content = sha256_file(path, decompress=True)
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            detail += f"; it is not a readable gzip file ({exc})"
        else:
            if content == spec.content_sha256:
                return
            detail += f"; its decompressed bytes hash to {content}, expected {spec.content_sha256}"
    raise ChecksumError(detail)


def _sources(
    spec: DatasetSpec, file: FileSpec, mirror: Path | None, download: bool
) -> list[tuple[str, str]]:
    sources = []
    names = (file.name, *file.aliases)
    if mirror is not None:
        sources.extend(("mirror", str(mirror / spec.mirror_dir / name)) for name in names)
    if spec.debian_dir:
        sources.extend(("Debian package", f"{spec.debian_dir}/{name}") for name in names)
    if download:
        sources.append(("upstream", f"{spec.upstream}/{file.name}"))
        sources.extend(("upstream", url) for url in file.urls)
    return sources


def _download(url: str, dest: Path) -> None:
    with (
        urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response,
        open(dest, "wb") as out,
    ):
        shutil.copyfileobj(response, out, _CHUNK)


def obtain(
    spec: DatasetSpec,
    file: FileSpec,
    dest: Path,
    mirror: Path | None,
    log: Callable[[str], None],
    download: bool = True,
) -> str:
    """Copy or download ``file`` to ``dest`` from the first source that has it, and verify it.

    Returns
    -------
    str
        Where it came from, e.g. ``"the mirror (/srv/mirror/msd_full/yearpredictionmsd.zip)"``.

    Raises
    ------
    ChecksumError
        A source had the file but its bytes are wrong; ``dest`` is removed. The message names
        the file and the source.
    DataSourceError
        No source had the file; the message lists each source tried and why it failed.
    OSError
        ``dest``'s disk or quota is full (ENOSPC, EDQUOT): no other source is tried, since
        none would fit either; ``dest`` is removed.
    """
    tried = []
    for source, location in _sources(spec, file, mirror, download):
        try:
            if source == "upstream":
                log(f"  {file.name}: downloading {location}")
                _download(location, dest)
            elif Path(location).is_file():
                shutil.copyfile(location, dest)
            else:
                tried.append(f"{source}: no file at {location}")
                continue
        except (OSError, urllib.error.URLError) as exc:
            dest.unlink(missing_ok=True)
            if is_disk_full(exc):
                raise
            tried.append(f"{source}: {location} failed ({exc})")
            continue
        try:
            verify(dest, file)
        except ChecksumError as exc:
            dest.unlink(missing_ok=True)
            raise ChecksumError(
                f"refused {spec.mirror_dir}/{file.name} from the {source} ({location}): {exc}. "
                "The file is corrupt or not the course's copy: replace it, or fetch from another "
                "source. Nothing was written to the store."
            ) from None
        checked = "verified" if file.sha256 else "copied (no published checksum: content next)"
        log(f"  {file.name}: {checked} (from the {source})")
        return f"the {source} ({location})"
    raise DataSourceError(
        f"no source could deliver {spec.mirror_dir}/{file.name}:\n  - "
        + "\n  - ".join(tried)
        + ("" if download else "\n  - upstream: not tried (--no-download)")
        + "\nPass a mirror folder with --mirror (or SCALELAB_DATA_MIRROR)"
        + (", or install Debian's dataset-fashion-mnist package" if spec.debian_dir else "")
        + "."
    )


def convert(spec: DatasetSpec, root: Path, origins: dict[str, str]) -> dict[str, int]:
    """Write the Parquet shards of ``spec`` under ``root`` from its originals in ``root/raw``.

    ``origins`` names where each original came from (file name -> :func:`obtain`'s answer).
    Returns the rows per split.

    Raises
    ------
    ContentCheckError
        A file checked by its content (``spec.table``) broke a rule: the message names the file,
        its source, the line and the rule.
    """
    if spec.table is None:
        return CONVERTERS[spec.name](root / "raw", root)
    file = spec.files[0]
    try:
        return convert_csv_zip(root / "raw" / file.name, spec.table, root)
    except ContentCheckError as exc:
        raise ContentCheckError(
            f"refused {spec.mirror_dir}/{file.name} from {origins[file.name]}: {exc}. The file "
            "is corrupt, truncated or not the data set: replace it, or fetch from another "
            "source. Nothing was written to the store."
        ) from None


def renames_atomically(fs: AbstractFileSystem) -> bool:
    """True when ``fs`` moves a folder in one atomic step (its protocol's ``atomic_rename``: a
    local disk, HDFS, where the namenode renames the folder).

    Object stores (S3 and the like) have no rename at all -- fsspec's ``mv`` copies every object
    and deletes the originals, which s3fs on SeaweedFS cannot even do for a folder -- so a data
    set is published there by writing its objects in place and the manifest last.
    """
    return protocols.for_fs(fs).atomic_rename


def _publish_by_rename(
    fs: AbstractFileSystem, local_root: Path, target: str, manifest: dict
) -> None:
    """Stage ``local_root`` under ``datasets/.staging/``, write the manifest, rename into place.

    The data set appears whole, manifest included, at once; a failure leaves the store as it was.
    """
    staging = f"{STAGING}/{Path(target).name}-{uuid.uuid4().hex[:8]}"
    try:
        for rel in iter_files(local_root):
            fs.makedirs(f"{staging}/{rel.parent.as_posix()}", exist_ok=True)
            fs.put_file(str(local_root / rel), f"{staging}/{rel.as_posix()}")
        fs.pipe_file(f"{staging}/{MANIFEST}", _manifest_bytes(manifest))
        if fs.exists(target):
            fs.rm(target, recursive=True)
        fs.mv(staging, target, recursive=True)
    finally:
        if fs.exists(staging):
            fs.rm(staging, recursive=True)
        _remove_empty_staging(fs)


def _publish_manifest_last(
    fs: AbstractFileSystem, local_root: Path, target: str, manifest: dict
) -> None:
    """Write ``local_root``'s files as the final objects under ``target``, the manifest last.

    For stores without an atomic rename (object stores). The manifest marks the data set
    complete, so it goes first when an old version is replaced and last when the new one is
    written: until then :func:`is_present` is False and a re-run starts over. A failure removes
    what was written, as far as the store still answers.
    """
    if fs.exists(f"{target}/{MANIFEST}"):
        fs.rm(f"{target}/{MANIFEST}")
    remove_tree(fs, target)
    try:
        for rel in iter_files(local_root):
            fs.put_file(str(local_root / rel), f"{target}/{rel.as_posix()}")
        fs.pipe_file(f"{target}/{MANIFEST}", _manifest_bytes(manifest))
    except BaseException:
        try:
            if not fs.exists(f"{target}/{MANIFEST}"):
                remove_tree(fs, target)
        except Exception:  # noqa: BLE001 -- the store went away: the missing manifest says enough
            pass
        raise


def remove_tree(fs: AbstractFileSystem, path: str) -> None:
    """Remove ``path`` and everything under it, folders included, if it exists (as the store's
    protocol removes a tree: on S3 the folders a filer keeps are deleted too)."""
    protocols.for_fs(fs).remove_tree(fs, path)


def _manifest_bytes(manifest: dict) -> bytes:
    return json.dumps(manifest, indent=2).encode()


def _remove_empty_staging(fs: AbstractFileSystem) -> None:
    if not fs.exists(STAGING):
        return
    # On SeaweedFS an empty folder lists as a file of its own name with a "/" after it.
    if all(path.rstrip("/") == STAGING for path in fs.find(STAGING)):
        remove_tree(fs, STAGING)


def _clean_stale(fs: AbstractFileSystem, spec: DatasetSpec, log: Callable[[str], None]) -> None:
    """Remove what an interrupted fetch of ``spec`` left: its staging folders (or prefixes), and
    a data set folder without its manifest."""
    if fs.exists(STAGING):
        for path in fs.ls(STAGING, detail=False):
            if Path(path).name.startswith(f"{spec.name}-"):
                log(f"{spec.name}: removing {path}/, left by an interrupted fetch")
                remove_tree(fs, path)
        _remove_empty_staging(fs)
    target = dataset_dir(spec)
    if fs.exists(target) and not fs.exists(f"{target}/{MANIFEST}"):
        log(f"{spec.name}: {target}/ has no {MANIFEST} (an interrupted fetch): writing it anew")
        remove_tree(fs, target)


def _staging_full(spec: DatasetSpec, root: Path) -> StoreFullError:
    """The local staging folder ``root`` filled up while ``spec`` was obtained or converted."""
    known = [file.size for file in spec.files if file.size is not None]
    originals = f"its originals are {format_bytes(sum(known))}" if known else "its originals"
    return StoreFullError(
        f"fetching {spec.name} stopped before the store: {full_disk_message(root)} The fetch "
        f"stages the data set there first ({originals}, plus their Parquet shards); set TMPDIR "
        "to a folder on a bigger disk. Nothing was written to the store."
    )


def _store_full(
    fs: AbstractFileSystem, spec: DatasetSpec, root: Path, manifest: dict, exc: BaseException
) -> StoreFullError:
    """The store's disk filled up while ``spec``, staged under ``root``, was published; the
    publishing step has removed what it wrote."""
    needed = sum((root / rel).stat().st_size for rel in iter_files(root))
    needed += len(_manifest_bytes(manifest))
    root_path = fs.path if isinstance(fs, DirFileSystem) else ""
    target = None
    if protocols.for_fs(fs).local:
        target = f"{root_path.rstrip('/')}/{dataset_dir(spec)}" if root_path else dataset_dir(spec)
    failure = full_disk_failure(
        root_path, exc, path=target, needed_bytes=needed, doing=f"fetching {spec.name}"
    )
    return StoreFullError(f"{failure} Nothing of {spec.name} was left in the store.")


def fetch_dataset(
    spec: DatasetSpec,
    fs: AbstractFileSystem,
    mirror: str | Path | None = None,
    log: Callable[[str], None] = print,
    download: bool = True,
) -> bool:
    """Put one data set into the store: originals under ``raw/``, Parquet shards under ``parquet/``.

    Parameters
    ----------
    spec
        The data set (see :data:`scalelab.store.DATASETS`).
    fs
        The store, rooted at its top (see :func:`scalelab.store.open_store`).
    mirror
        A folder laid out like ``shared/data``, tried first; None skips it.
    log
        Called with one line of progress at a time.
    download
        Try the upstream address when no local source has a file (False: air-gapped hosts).

    Returns
    -------
    bool
        True when the data set was written, False when it was already present (nothing done).

    Raises
    ------
    ChecksumError, ContentCheckError, DataSourceError
        A file was refused or could not be had; the store is left as it was.
    StoreFullError
        A disk or quota filled up (ENOSPC, EDQUOT): the local staging folder (``TMPDIR``) or the
        store's. The message names the disk, its free and total space and, for the store, how
        much more the data set needs; the data set is left out of the store (no manifest, no
        files of this fetch).
    """
    if is_present(fs, spec):
        log(f"{spec.name}: already in the store at {dataset_dir(spec)}/, nothing to do")
        return False
    _clean_stale(fs, spec, log)
    log(f"{spec.name}: fetching {len(spec.files)} file(s)")
    mirror_path = Path(mirror) if mirror else None
    with tempfile.TemporaryDirectory(prefix=f"scalelab-{spec.name}-") as tmp:
        root = Path(tmp)
        try:
            (root / "raw").mkdir()
            origins = {
                file.name: obtain(spec, file, root / "raw" / file.name, mirror_path, log, download)
                for file in spec.files
            }
            rows = convert(spec, root, origins)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            raise _staging_full(spec, root) from exc
        files = {rel.as_posix(): sha256_file(root / rel) for rel in iter_files(root)}
        manifest = {
            "dataset": spec.name,
            "layout_version": spec.layout_version,
            "rows": rows,
            "files": files,
        }
        publish = _publish_by_rename if renames_atomically(fs) else _publish_manifest_last
        try:
            publish(fs, root, dataset_dir(spec), manifest)
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            raise _store_full(fs, spec, root, manifest, exc) from exc
    log(
        f"{spec.name}: written to {dataset_dir(spec)}/ ("
        + ", ".join(f"{split}: {count} rows" for split, count in rows.items())
        + ")"
    )
    return True
