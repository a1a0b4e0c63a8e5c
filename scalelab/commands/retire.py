"""``scalelab end-of-term``: archive every student's work, then retire them (issue 32).

For each student (:mod:`scalelab.commands.retire_plan` decides who and what), in this order,
each step only once the one before it succeeded:

1. **archive** into ``<archive>/<user>/`` (mode 0700): ``home.tar.gz`` (the home folder;
   symbolic links archived as links, never followed), ``store-home.tar.gz`` (every file under
   the course store's ``home/<user>``, any fsspec protocol) and ``manifest.json`` (what came
   from where, file counts, bytes, SHA-256 of each archive, the time);
2. **check** each archive by reading it back whole: its member count must be what was written;
3. **retire**: the store home, the home folder, the system user ScaleLab made (``userdel``) and
   the hub user (JupyterHub's ORM deletes its servers' records and tokens with it).

A student whose archive folder exists already is left alone (an archive is never overwritten);
a student whose archive fails keeps everything. ``--dry-run`` prints the plan and changes and
writes nothing. The hub must be stopped: its database is changed underneath it otherwise.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalelab.commands.retire_plan import (
    Account,
    HubUser,
    PlanError,
    Retirement,
    choose_students,
    plan_retirement,
)

#: Seconds to wait for a TCP connection to the hub's public port (is it running?).
CONNECT_TIMEOUT_S = 1.0


class RetireError(Exception):
    """The end of term cannot run (hub running, database missing, bad students); one line that
    names the problem and the fix. Nothing was changed."""


@dataclass(frozen=True)
class Where:
    """Where the hub keeps things: its database URL, homes, store and system user prefix."""

    db_url: str
    home_root: str
    system_user_prefix: str
    store_url: str
    store_options: dict


def hub_running(state_dir: Path, ip: str, port: int) -> str | None:
    """Why the hub looks running (``scalelab up``'s lock held, or its public address
    answering a TCP connection), else None."""
    from scalelab.commands.doctor import hub_pids

    if hub_pids(state_dir):
        return f"scalelab up holds {state_dir}"
    host = "127.0.0.1" if ip in ("", "0.0.0.0") else ip
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return f"something answers on the hub's address {host}:{port}"
    except OSError:
        return None


def _account(name: str) -> Account | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(entry.pw_dir, entry.pw_gecos)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checked(path: Path, members: int) -> dict[str, Any]:
    """``path``'s facts for the manifest, after reading the archive back whole.

    Raises
    ------
    RetireError
        It cannot be read, or holds another number of members than ``members``.
    """
    try:
        with tarfile.open(path, "r:gz") as tar:
            found = 0
            for member in tar:
                if member.isfile():
                    tar.extractfile(member).read()  # every byte read back: the gzip CRC checked
                found += 1
    except (OSError, tarfile.TarError) as exc:
        raise RetireError(f"the archive {path} does not read back: {exc}") from None
    if found != members:
        raise RetireError(f"the archive {path} holds {found} entries, {members} were written")
    return {"file": path.name, "entries": members, "bytes": path.stat().st_size}


def archive_home(home: Path, target: Path) -> dict[str, Any]:
    """Archive folder ``home`` as ``target`` (tar, gzip; the folder is ``home/`` inside);
    returns its manifest entry (``entries``, ``bytes``, ``sha256``).

    Raises
    ------
    RetireError
        It cannot be read or written, or does not read back whole.
    """
    count = 0

    def counted(info: tarfile.TarInfo) -> tarfile.TarInfo:
        nonlocal count
        count += 1
        return info

    try:
        with tarfile.open(target, "w:gz") as tar:  # dereference=False: links stay links
            tar.add(home, arcname="home", filter=counted)
    except OSError as exc:
        raise RetireError(f"archiving {home} into {target} failed: {exc}") from None
    return {**_checked(target, count), "from": str(home), "sha256": _sha256(target)}


def archive_store_home(fs: Any, folder: str, target: Path) -> dict[str, Any]:
    """Archive every file under ``folder`` of store ``fs`` (an fsspec file system) as
    ``target`` (``store-home/<relative path>`` inside); returns its manifest entry.

    Raises
    ------
    RetireError
        The store cannot be listed or read, or the archive does not read back whole.
    """
    try:
        files = fs.find(folder) if fs.exists(folder) else []
        with tarfile.open(target, "w:gz") as tar:
            for path in files:
                relative = path[len(folder) :].lstrip("/") if path.startswith(folder) else path
                info = tarfile.TarInfo(f"store-home/{relative}")
                info.size = fs.size(path)
                info.mode = 0o600
                with fs.open(path, "rb") as f:
                    tar.addfile(info, f)
    except Exception as exc:  # noqa: BLE001 -- each fsspec back end raises its own errors
        raise RetireError(f"archiving the store's {folder} failed: {exc}") from None
    return {**_checked(target, len(files)), "from": folder, "sha256": _sha256(target)}


def _userdel(name: str) -> None:
    tool = shutil.which("userdel", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"]))
    if not tool:
        raise RetireError("`userdel` is not installed: apt-get install passwd")
    done = subprocess.run([tool, name], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RetireError(f"userdel {name} exited {done.returncode}: {done.stderr.strip()}")


def describe(r: Retirement) -> str:
    """What retiring ``r.user`` archives and removes, as words (``"home /h/alice, store
    home/alice, system user jupyter-alice, hub user alice"``), with what is kept."""
    parts = [f"home {r.home}" if r.home else "", f"store {r.store_home}"]
    if r.system_user:
        parts.append(f"system user {r.system_user}")
    line = ", ".join([*filter(None, parts), f"hub user {r.user}"])
    return f"{line} ({r.kept})" if r.kept else line


def retire_one(
    r: Retirement, *, fs: Any, archive: Path, delete_hub_user: Callable[[str], None]
) -> dict[str, Any]:
    """Archive, check, then retire one student; returns the manifest written.

    Raises
    ------
    RetireError
        A step failed; what came before it stays (an archive without removal, never a
        removal without an archive).
    """
    # Written beside, then renamed: a failed archive leaves no <archive>/<user> to skip later.
    partial = archive / f".{r.user}.partial"
    shutil.rmtree(partial, ignore_errors=True)  # a run stopped half-way before
    partial.mkdir(mode=0o700)
    try:
        manifest: dict[str, Any] = {"user": r.user, "system_user": r.system_user, "kept": r.kept}
        if r.home and Path(r.home).is_dir():
            manifest["home"] = archive_home(Path(r.home), partial / "home.tar.gz")
        manifest["store_home"] = archive_store_home(fs, r.store_home, partial / "store-home.tar.gz")
        manifest["archived_at"] = datetime.datetime.now(datetime.UTC).isoformat()
        (partial / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        for written in partial.iterdir():
            written.chmod(0o600)  # the students' work: root's alone, as the folder
        partial.rename(archive / r.user)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    try:
        if fs.exists(r.store_home):
            fs.rm(r.store_home, recursive=True)
        if r.home and r.remove_home and Path(r.home).is_dir():
            shutil.rmtree(r.home)
    except Exception as exc:  # noqa: BLE001 -- each fsspec back end raises its own errors
        raise RetireError(f"{r.user} archived, but removing their files failed: {exc}") from None
    if r.system_user:
        _userdel(r.system_user)
    delete_hub_user(r.user)
    return manifest


def run_end_of_term(
    where: Where,
    *,
    archive: Path,
    names: Sequence[str] = (),
    group: str | None = None,
    dry_run: bool = False,
    state_dir: Path,
    running: str | None,
    out: Callable[[str], None] = print,
) -> int:
    """Retire the chosen students (see the module); returns the exit status (0: every
    student retired or nothing to do, 1: some failed, each named on ``out``).

    Raises
    ------
    RetireError
        Nothing can be done: the hub is running (``running`` says why), its database is not
        there, the students asked for are not students, the archive is not writable.
    """
    from jupyterhub import orm

    from scalelab.commands.doctor import sqlite_path
    from scalelab.store import open_store

    if running and not dry_run:
        raise RetireError(f"the hub looks running ({running}): stop it first, then run this again")
    if where.db_url.startswith("sqlite"):
        db_file = sqlite_path(where.db_url, state_dir)
        if db_file is None or not db_file.is_file():
            raise RetireError(
                f"no hub database at {db_file or where.db_url}: check c.JupyterHub.db_url"
            )
    try:
        db = orm.new_session_factory(where.db_url)()
    except Exception as exc:  # noqa: BLE001 -- SQLAlchemy's drivers and JupyterHub's schema check
        raise RetireError(
            f"the hub database {where.db_url} cannot be opened: {str(exc)[:300]} (an older "
            "schema: run jupyterhub upgrade-db first)"
        ) from None
    try:
        users = [
            HubUser(u.name, bool(u.admin), tuple(g.name for g in u.groups))
            for u in db.query(orm.User)
        ]
        try:
            students = choose_students(users, names, group)
        except PlanError as exc:
            raise RetireError(str(exc)) from None
        plans = [
            plan_retirement(
                s.name,
                home_root=where.home_root,
                system_user_prefix=where.system_user_prefix,
                account=_account,
            )
            for s in students
        ]
        if not plans:
            out("no students to retire")
            return 0
        if dry_run:
            if running:
                out(f"note: the hub looks running ({running}): stop it before the real run")
            for r in plans:
                out(f"{r.user}: would archive and remove {describe(r)}, into {archive / r.user}")
            out(f"dry run: {len(plans)} students, nothing was changed")
            return 0
        return _retire_all(
            plans, db, archive, open_store(where.store_url, where.store_options), out
        )
    finally:
        db.close()


def _retire_all(plans: list[Retirement], db: Any, archive: Path, fs: Any, out: Callable) -> int:
    from jupyterhub import orm

    try:
        archive.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise RetireError(f"cannot make the archive folder {archive}: {exc}") from None

    def delete_hub_user(name: str) -> None:
        db.delete(orm.User.find(db, name))
        db.commit()

    failed = 0
    for r in plans:
        if (archive / r.user).exists():
            out(f"{r.user}: skipped, {archive / r.user} exists (an archive is never overwritten)")
            failed += 1
            continue
        try:
            retire_one(r, fs=fs, archive=archive, delete_hub_user=delete_hub_user)
        except RetireError as exc:
            out(f"{r.user}: not retired: {exc}")
            failed += 1
            continue
        out(f"{r.user}: archived and removed {describe(r)}; archive {archive / r.user}")
    done = len(plans) - failed
    out(
        f"{done} of {len(plans)} students retired"
        + (f", {failed} not (see above)" if failed else "")
    )
    return 1 if failed else 0
