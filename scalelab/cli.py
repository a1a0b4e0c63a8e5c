"""The ``scalelab`` command: ``up``, ``data fetch``, ``kernels install``, ``doctor``, ``labs``,
``end-of-term``, ``submit``, ``submissions``, ``collect``, ``autograde`` and ``feedback``.

Errors that a user can fix are printed as one line, ``scalelab: error: ...``, with exit status 2
(bad usage or configuration) or 1 (a data set could not be fetched, a labs sync stopped);
never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from scalelab import __version__, envvars


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (1 to 65535)")
    return port


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scalelab", description="ScaleLab: a course hub for deep learning on big data."
    )
    parser.add_argument("--version", action="version", version=f"scalelab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run a course hub on this machine (embedded defaults)")
    up.add_argument(
        "--state-dir",
        type=Path,
        help="hub database, homes, local store "
        "(default: $SCALELAB_STATE_DIR, else /var/lib/scalelab for root, else "
        "~/.local/share/scalelab)",
    )
    up.add_argument(
        "--ip", default="127.0.0.1", help="address to serve on (default: 127.0.0.1, loopback only)"
    )
    up.add_argument("--port", type=_port, default=8000, help="port to serve on (default: 8000)")
    up.add_argument(
        "--password",
        help="login password (default: $SCALELAB_PASSWORD, else generated and printed)",
    )
    up.add_argument("--store", help="course store URL (default: <state dir>/store as file://)")
    up.add_argument("--config", help="your jupyterhub_config.py, loaded after ScaleLab's defaults")
    up.add_argument(
        "--shared-identity",
        action="store_true",
        help="run every server as the user running scalelab up, even when run by root: a "
        "single-user trial where students can read each other's work (needed for --ip beyond "
        "loopback when not run by root)",
    )
    up.add_argument(
        "--hadoop",
        action="store_true",
        help="the course's cluster path on this machine: run the Hadoop test cluster (HDFS and "
        "YARN, built by ./install.sh) as a hub service, the store on its HDFS and Spark on its "
        "YARN; its ports and data are kept in <state dir>/hadoop",
    )

    data = sub.add_parser("data", help="course data sets")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    fetch = data_sub.add_parser("fetch", help="put data sets into the course store, checksummed")
    fetch.add_argument(
        "names", nargs="+", metavar="NAME", help="fashion-mnist, millionsong, msd-full"
    )
    fetch.add_argument(
        "--mirror",
        help=f"folder laid out like shared/data, tried first (default: ${envvars.DATA_MIRROR})",
    )
    fetch.add_argument(
        "--store",
        help=f"course store URL (default: ${envvars.STORE_URL}, else scalelab up's store)",
    )
    fetch.add_argument(
        "--state-dir", type=Path, help="scalelab up's state folder, for its default store"
    )
    fetch.add_argument(
        "--no-download",
        action="store_true",
        help="never try the upstream addresses (air-gapped hosts)",
    )

    kernels = sub.add_parser("kernels", help="ScaleLab's kernelspecs")
    kernels_sub = kernels.add_subparsers(dest="kernels_command", required=True)
    install = kernels_sub.add_parser(
        "install", help="write the PySpark, TensorFlow and PyTorch kernelspecs"
    )
    install.add_argument(
        "--prefix",
        default=sys.prefix,
        help="install under PREFIX/share/jupyter (default: this Python's prefix)",
    )
    doctor = sub.add_parser(
        "doctor",
        help="check Java, Spark, store, GPUs, proxy, the hub's ports, database; creates nothing",
    )
    doctor.add_argument("--state-dir", type=Path, help="scalelab up's state folder")
    doctor.add_argument("--ip", default="127.0.0.1", help="address the hub serves on")
    doctor.add_argument("--port", type=_port, default=8000, help="port the hub serves on")
    doctor.add_argument(
        "--store", help="course store URL or path (default: from the configuration)"
    )
    doctor.add_argument("--config", help="your jupyterhub_config.py, as given to scalelab up")
    doctor.add_argument(
        "--hadoop",
        action="store_true",
        help="check scalelab up --hadoop's configuration: the store on the test cluster's HDFS, "
        "Spark on its YARN (while it runs)",
    )
    doctor.add_argument(
        "--quick",
        action="store_true",
        help="look at each kernel's program and modules without starting the kernel",
    )
    doctor.add_argument(
        "--student",
        default="",
        help="a student to try a Slurm spawner's exec_prefix as (default: the first of "
        "c.Authenticator.allowed_users)",
    )
    sub.add_parser("config-reference", help="print the configuration reference (Markdown)")
    _add_labs_parser(sub)
    _add_end_of_term_parser(sub)
    _add_handin_parsers(sub)
    return parser


def _add_handin_parsers(sub: argparse._SubParsersAction) -> None:
    submit = sub.add_parser(
        "submit", help="hand in a lab to the course (from a terminal of your course server)"
    )
    submit.add_argument("lab", help="the lab's name, e.g. lab1_millionsong_regression")
    submit.add_argument(
        "notebook",
        nargs="?",
        help="the notebook to hand in (default: <lab>.ipynb here, else in your home)",
    )
    submit.add_argument("--json", action="store_true", help="print the receipt as JSON")
    collect = sub.add_parser(
        "collect", help="an instructor's copy of every student's hand-in of a lab (hub admins)"
    )
    collect.add_argument("lab", help="the lab's name")
    collect.add_argument(
        "--before",
        help="collect the latest version at or before this time (ISO 8601 with its UTC offset, "
        "or 'deadline': the lab's); default: the latest version",
    )
    collect.add_argument(
        "--to", type=Path, help="the folder to collect into (default: collected/<lab>)"
    )
    collect.add_argument(
        "--hub",
        help="the hub's address, e.g. http://127.0.0.1:8000 (default: JUPYTERHUB_API_URL); the "
        "token of a hub admin in SCALELAB_HUB_TOKEN",
    )
    grade = sub.add_parser(
        "autograde",
        help="grade collected hand-ins with a lab's hidden tests, one sandboxed run each",
    )
    grade.add_argument("collected", type=Path, help="the folder `scalelab collect` wrote")
    grade.add_argument(
        "instructor", type=Path, help="the lab's instructor notebook (hidden tests in it)"
    )
    grade.add_argument(
        "--cell-timeout", type=float, default=300.0, help="seconds per cell (default 300)"
    )
    grade.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds per notebook (default 1800)"
    )
    grade.add_argument(
        "--memory-mib", type=int, default=4096, help="memory of each run, MiB (default 4096)"
    )
    grade.add_argument(
        "--as-user", default="nobody", help="the user each run is, under root (default nobody)"
    )
    grade.add_argument(
        "--return",
        dest="return_feedback",
        action="store_true",
        help="then return each feedback notebook to its student through the hub (--hub, "
        "SCALELAB_HUB_TOKEN as for collect)",
    )
    grade.add_argument("--hub", help="the hub's address (default: JUPYTERHUB_API_URL)")
    feedback = sub.add_parser(
        "feedback", help="get your feedback on a lab into your home (from your course server)"
    )
    feedback.add_argument("lab", help="the lab's name")
    listing = sub.add_parser("submissions", help="list what you handed in, every version")
    listing.add_argument("lab", nargs="?", help="one lab only")
    listing.add_argument("--json", action="store_true", help="print the receipts as JSON")


def _add_end_of_term_parser(sub: argparse._SubParsersAction) -> None:
    end = sub.add_parser(
        "end-of-term",
        help="archive the students' homes and store homes, then remove them, their system "
        "users and hub users (the hub stopped)",
    )
    end.add_argument("--archive", type=Path, required=True, help="folder for the archives")
    end.add_argument(
        "--dry-run", action="store_true", help="print what would be done; change nothing"
    )
    end.add_argument(
        "--user",
        dest="names",
        action="append",
        default=[],
        metavar="NAME",
        help="retire this student only (repeat for more; default: every student)",
    )
    end.add_argument("--group", help="retire the students of this JupyterHub group only")
    end.add_argument("--state-dir", type=Path, help="scalelab up's state folder")
    end.add_argument("--config", help="your jupyterhub_config.py, as given to the hub")


def _add_labs_parser(sub: argparse._SubParsersAction) -> None:
    labs = sub.add_parser("labs", help="release the course labs, deliver them into a home")
    labs_sub = labs.add_subparsers(dest="labs_command", required=True)
    release = labs_sub.add_parser(
        "release", help="write student versions: solutions stubbed, hidden tests and outputs gone"
    )
    release.add_argument("src_dir", metavar="SRC_DIR", help="folder of the instructor notebooks")
    release.add_argument("dest_dir", metavar="DEST_DIR", help="folder for the student versions")
    sync = labs_sub.add_parser(
        "sync", help="copy new labs and versions into a home, never over a changed notebook"
    )
    sync.add_argument("home", nargs="?", default=".", help="the home (default: this folder)")
    sync.add_argument("--from", dest="from_dir", help="released labs (default: ScaleLab's own)")


def _labs(args: argparse.Namespace) -> int:
    from scalelab.hub_ext.labs.release import ReleaseError, release
    from scalelab.hub_ext.labs.sync import sync_labs

    if args.labs_command == "release":
        try:
            written = release(args.src_dir, args.dest_dir)
        except ReleaseError as exc:
            raise UsageError(f"{exc} (nothing was written)") from None
        for path in written:
            print(f"released {path}")
        return 0
    if not Path(args.home).is_dir():
        raise UsageError(f"{args.home} is not a folder: give the home to copy the labs into")
    labs = None
    if args.from_dir:
        try:
            labs = {p.name: p.read_bytes() for p in sorted(Path(args.from_dir).glob("*.ipynb"))}
        except OSError as exc:
            raise UsageError(f"cannot read the released labs in {args.from_dir}: {exc}") from None
        if not labs:
            raise UsageError(f"{args.from_dir} holds no released notebooks (*.ipynb)")
    try:
        report = sync_labs(args.home, labs)
    except OSError as exc:  # the home (or disk) would not take it: one line, status 1
        print(f"scalelab: error: copying the labs into {args.home} stopped: {exc}", file=sys.stderr)
        return 1
    if not report.messages and not report.refused:
        print("nothing new: every lab is there already")
    warned = set(report.warnings)  # a malformed manifest set aside, a folder named like a lab
    for message in report.messages:
        if message in warned:
            print(f"scalelab: warning: {message}", file=sys.stderr)
        else:
            print(message)
    folder = args.from_dir or os.environ.get(envvars.LABS_DIR)
    for problem in report.problems:
        where = f"{folder.rstrip('/')}/" if folder else ""
        print(f"scalelab: error: {where}{problem}", file=sys.stderr)
    return 2 if report.refused else 0


def _doctor(args: argparse.Namespace) -> int:
    from scalelab.commands.doctor import doctor_checks
    from scalelab.commands.doctor_report import exit_status, format_checks
    from scalelab.commands.state_files import default_state_dir

    try:
        checks = doctor_checks(
            args.state_dir or default_state_dir(),
            ip=args.ip,
            port=args.port,
            store_url=args.store,
            config_file=args.config,
            quick=args.quick,
            student=args.student,
            hadoop=args.hadoop,
        )
    except (OSError, SyntaxError) as exc:
        raise UsageError(f"cannot read the configuration: {exc}") from None
    print(format_checks(checks))
    return exit_status(checks)


def _end_of_term(args: argparse.Namespace) -> int:
    from scalelab.commands.doctor import load_settings
    from scalelab.commands.retire import RetireError, Where, hub_running, run_end_of_term
    from scalelab.commands.state_files import default_state_dir
    from scalelab.hub_ext.hub.config_check import ConfigProblem

    if args.names and args.group:
        raise UsageError("give --user or --group, not both")
    state_dir = (args.state_dir or default_state_dir()).expanduser().resolve()
    try:
        s = load_settings(state_dir, config_file=args.config)
    except (OSError, SyntaxError) as exc:
        raise UsageError(f"cannot read the configuration: {exc}") from None
    except ConfigProblem as exc:
        raise UsageError(f"{exc.message}. {exc.fix} (nothing was changed)") from None
    where = Where(s.db_url, s.home_root, s.system_user_prefix, s.store_url, s.store_options)
    try:
        return run_end_of_term(
            where,
            archive=args.archive.expanduser().resolve(),
            names=args.names,
            group=args.group,
            dry_run=args.dry_run,
            state_dir=state_dir,
            running=hub_running(state_dir, s.ip, s.port),
        )
    except RetireError as exc:
        raise UsageError(str(exc)) from None


def _config_reference(_args: argparse.Namespace) -> int:
    from scalelab.commands.config_reference import reference_text

    print(reference_text(), end="")
    return 0


def _up(args: argparse.Namespace) -> int:
    from scalelab.commands.state_files import default_state_dir
    from scalelab.commands.up import run_up

    return run_up(
        args.state_dir or default_state_dir(),
        ip=args.ip,
        port=args.port,
        password=args.password,
        store_url=args.store,
        operator_config=args.config,
        state_source="--state-dir" if args.state_dir else _state_dir_source(),
        shared_identity=args.shared_identity,
        hadoop=args.hadoop,
    )


def _state_dir_source() -> str:
    """Where ``scalelab up``'s default state folder comes from, for its error messages."""
    return f"${envvars.STATE_DIR}" if os.environ.get(envvars.STATE_DIR) else "the state folder"


def _data_fetch(args: argparse.Namespace) -> int:
    from scalelab.commands.state_files import default_state_dir, default_store_url
    from scalelab.store import ALL_DATASETS, fetch_dataset, open_store
    from scalelab.store.access.fs import store_options_from_env
    from scalelab.store.errors import store_failure

    unknown = [n for n in args.names if n not in ALL_DATASETS]
    if unknown:
        known = ", ".join(ALL_DATASETS)
        raise UsageError(f"unknown data set(s): {', '.join(unknown)}; known: {known}")
    store_url = (
        args.store
        or os.environ.get(envvars.STORE_URL)
        or default_store_url(args.state_dir or default_state_dir())
    )
    mirror = args.mirror or os.environ.get(envvars.DATA_MIRROR)
    if mirror and not Path(mirror).is_dir():
        what = "is not a folder" if Path(mirror).exists() else "does not exist"
        raise UsageError(f"the mirror {mirror} {what}: give a folder laid out like shared/data")
    try:
        fs = open_store(store_url, store_options_from_env())  # e.g. an S3 endpoint and keys
        print(f"Course store: {store_url}")
        for name in dict.fromkeys(args.names):
            fetch_dataset(ALL_DATASETS[name], fs, mirror=mirror, download=not args.no_download)
    except Exception as exc:  # noqa: BLE001 -- each fsspec back end raises its own errors
        raise store_failure(store_url, exc) from None
    return 0


def _kernels_install(args: argparse.Namespace) -> int:
    from scalelab.kernels import install_kernelspecs

    for path in install_kernelspecs(Path(args.prefix) / "share" / "jupyter"):
        print(f"installed {path}")
    return 0


#: The hand-in commands (:mod:`scalelab.commands.handin_cli` runs them).
HANDIN_COMMANDS = ("submit", "submissions", "collect", "autograde", "feedback")


def _handin(args: argparse.Namespace) -> int:
    from scalelab.commands import handin_cli

    return handin_cli.run(args)


class UsageError(Exception):
    """Bad arguments: printed as ``scalelab: error: ...``, exit status 2."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``scalelab`` console script; returns the exit status."""
    args = _parser().parse_args(argv)  # --help and usage errors exit here, before any import
    from scalelab.commands.errors import UpError
    from scalelab.store.errors import StoreError

    handlers = {"up": _up, "data": _data_fetch, "kernels": _kernels_install}
    handlers["labs"] = _labs
    handlers["doctor"] = _doctor
    handlers["config-reference"] = _config_reference
    handlers["end-of-term"] = _end_of_term
    handlers.update(dict.fromkeys(HANDIN_COMMANDS, _handin))
    try:
        return handlers[args.command](args)
    except (UsageError, UpError) as exc:
        print(f"scalelab: error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"scalelab: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
