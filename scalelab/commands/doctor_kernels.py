"""``scalelab doctor``'s check of the kernels the servers will offer.

Each kernelspec the servers see (``c.ScaleLabSpawner.kernelspec_path``, then Jupyter's own data
folders; ScaleLab's three as ``scalelab up`` writes them where its folder has none yet) must name
an interpreter that runs and has its kernel's modules (``ipykernel_launcher``, ScaleLab's start-up,
and the flavour's library: ``pyspark``, ``tensorflow``, ``torch``). A broken one otherwise
reaches the student as HTTP 500 "Unhandled error" when the notebook opens. Then each kernel is
started for real, as a server would (jupyter_client's ``KernelManager``, the servers'
environment), and must answer ``kernel_info``: a kernel whose start-up crashes is named with its
last line of stderr. The kernels run in a temporary folder (their ``HOME``, runtime and log
folders), removed afterwards, so the doctor still creates nothing.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scalelab.commands.doctor_report import FAIL, OK, WARN, Check

#: Seconds the interpreter of one environment may take to look up its modules.
LOOKUP_TIMEOUT_S = 60.0
#: Seconds a kernel may take from its start to its ``kernel_info`` reply (TensorFlow's import
#: alone takes 5-20 s on a busy two-core host).
START_TIMEOUT_S = 120.0
#: argv[0] values that jupyter_client replaces with the server's own interpreter.
SERVER_PYTHON = ("python", "python3", "{python}")
#: The library each of ScaleLab's flavours needs besides ipykernel.
FLAVOUR_MODULES = {"pyspark": "pyspark", "tensorflow": "tensorflow", "pytorch": "torch"}
#: Prints the modules of argv[1:] that the interpreter cannot find (no module is imported).
_FIND = (
    "import importlib.util, sys\n"
    "def found(m):\n"
    "    try:\n"
    "        return importlib.util.find_spec(m) is not None\n"
    "    except (ImportError, ValueError):\n"
    "        return False\n"
    "print(' '.join(m for m in sys.argv[1:] if not found(m)))\n"
)


def visible_specs(kernelspec_path: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Kernelspec name -> ``{"resource_dir", "spec"}`` as the servers' kernelspec manager finds
    them: each folder of ``kernelspec_path`` (its ``kernels/``) first, then Jupyter's data path."""
    from jupyter_client.kernelspec import KernelSpecManager

    return KernelSpecManager(kernel_dirs=kernel_dirs(kernelspec_path)).get_all_specs()


def kernel_dirs(kernelspec_path: Sequence[str]) -> list[str]:
    """The folders the servers' kernelspec manager searches, in order: each folder of
    ``kernelspec_path`` (its ``kernels/``), then Jupyter's data path's."""
    from jupyter_core.paths import jupyter_path

    return [os.path.join(d, "kernels") for d in kernelspec_path] + jupyter_path("kernels")


def required_modules(spec: Mapping[str, Any]) -> list[str]:
    """The modules a kernelspec's interpreter must have (pure): ``-m``'s module, and for one of
    ScaleLab's kernels its start-up and the flavour's library."""
    argv = list(spec.get("argv") or [])
    modules = [argv[argv.index("-m") + 1]] if "-m" in argv[:-1] else []
    flavour = ((spec.get("metadata") or {}).get("scalelab") or {}).get("flavour")
    if flavour in FLAVOUR_MODULES:
        modules += ["scalelab.kernels.startup", FLAVOUR_MODULES[flavour]]
    return modules


def interpreter(argv0: str, server_python: str) -> str | None:
    """The program ``argv0`` runs (the server's Python for ``python``), None when missing."""
    if argv0 in SERVER_PYTHON:
        return server_python
    found = shutil.which(argv0)
    return found if found and os.access(found, os.X_OK) else None


def missing_modules(python: str, modules: Sequence[str], timeout_s: float) -> list[str] | str:
    """The modules of ``modules`` that ``python`` cannot find, or why it did not run (a str)."""
    try:
        done = subprocess.run(
            [python, "-c", _FIND, *modules],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} did not run ({type(exc).__name__}: {exc})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"{python} exits with status {done.returncode}: {last}"
    return done.stdout.split()


def _last_line(log: Path) -> str:
    """The last non-empty line of a kernel's output, or a note that it printed nothing."""
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    return lines[-1].strip() if lines else "it printed nothing"


async def start_kernel(
    name: str, kernel_dirs: Sequence[str], env: Mapping[str, str], folder: Path, timeout_s: float
) -> float | str:
    """Start kernel ``name`` as a server would and wait for its ``kernel_info`` reply.

    The kernel finds its kernelspec in ``kernel_dirs`` (folders of ``kernels/<name>/``), gets
    ``env`` with its ``HOME``, ``TMPDIR``, runtime and log folders in a new folder under
    ``folder``, and is shut down at once after its reply.

    Returns
    -------
    float or str
        Seconds from the start to the reply; or why there was none (a str: the exception, the
        wait, or the kernel's last line of output when it died).
    """
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    from scalelab import envvars

    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=folder))
    log = work / "kernel.log"
    (work / "tmp").mkdir()  # a kernel stopped as it starts leaves pyspark's gateway folder
    kernel_env = {
        **env,
        "HOME": str(work),
        "TMPDIR": str(work / "tmp"),
        "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
        envvars.LOG_DIR: str(work / "logs"),
    }
    specs = KernelSpecManager(kernel_dirs=list(kernel_dirs))
    manager = AsyncKernelManager(
        kernel_name=name, kernel_spec_manager=specs, connection_file=str(work / "connection.json")
    )
    started = time.monotonic()
    with open(log, "wb") as out:
        try:
            await manager.start_kernel(
                env=kernel_env, cwd=str(work), stdout=out, stderr=subprocess.STDOUT
            )
        except Exception as exc:  # noqa: BLE001 - the kernel's launch fails in many ways; named
            return f"did not start ({type(exc).__name__}: {exc})"
        client = manager.client()
        try:
            client.start_channels()
            await client.wait_for_ready(timeout=timeout_s)
            return time.monotonic() - started
        except RuntimeError:  # jupyter_client's for both: it died, or it did not answer in time
            if await manager.is_alive():
                return f"started but did not answer within {timeout_s:.0f} s"
            return f"died as it started: {_last_line(log)}"
        finally:
            client.stop_channels()
            await manager.shutdown_kernel(now=True)


def start_kernels(
    names: Sequence[str],
    kernel_dirs: Sequence[str],
    env: Mapping[str, str],
    timeout_s: float,
    ours_first: bool = False,
) -> dict[str, float | str]:
    """:func:`start_kernel` for each of ``names``, side by side, in one temporary folder that
    is removed afterwards; kernel name -> seconds or why not. ``ours_first``: ScaleLab's
    kernelspecs as ``scalelab up`` will write them come before ``kernel_dirs``."""
    from scalelab.kernels.specs import install_kernelspecs

    async def all_of_them(folder: Path, dirs: list[str]) -> list[float | str]:
        return await asyncio.gather(
            *(start_kernel(name, dirs, env, folder, timeout_s) for name in names)
        )

    with tempfile.TemporaryDirectory(prefix="scalelab-doctor-kernels-") as folder:
        dirs = list(kernel_dirs)
        if ours_first:
            install_kernelspecs(folder)
            dirs.insert(0, os.path.join(folder, "kernels"))
        return dict(zip(names, asyncio.run(all_of_them(Path(folder), dirs)), strict=True))


def check_kernels(
    kernelspec_path: Sequence[str],
    up_writes: str | None = None,
    server_python: str = sys.executable,
    timeout_s: float = LOOKUP_TIMEOUT_S,
    start_env: Mapping[str, str] | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
) -> Check:
    """Each kernelspec the servers will offer: its interpreter runs and has its modules; with
    ``start_env`` (the servers' environment), each kernel that passed starts and answers.

    ``kernelspec_path`` is ``c.ScaleLabSpawner.kernelspec_path``. ``up_writes`` is the folder
    ``scalelab up`` writes ScaleLab's kernelspecs to at each start (its state folder's): when it
    is on the path, ScaleLab's kernels are checked as ``scalelab up`` will write them. Otherwise
    a ScaleLab kernel that no folder holds is a warning (``scalelab kernels install``).
    """
    from scalelab.kernels.specs import FLAVOURS, kernel_name, kernelspec

    specs = {name: found["spec"] for name, found in visible_specs(kernelspec_path).items()}
    ours_written = up_writes is not None and up_writes in kernelspec_path
    if ours_written:
        specs.update({kernel_name(f): kernelspec(f) for f in FLAVOURS})
    missing_ours = sorted(kernel_name(f) for f in FLAVOURS if kernel_name(f) not in specs)
    problems = []
    by_python: dict[str, dict[str, list[str]]] = {}  # python -> kernel -> its modules
    for name, spec in sorted(specs.items()):
        argv0 = (spec.get("argv") or [""])[0]
        python = interpreter(argv0, server_python)
        if python is None:
            problems.append(f"{name}: its program {argv0!r} is not found or not executable")
            continue
        by_python.setdefault(python, {})[name] = required_modules(spec)
    for python, kernels in by_python.items():
        wanted = sorted({m for modules in kernels.values() for m in modules})
        lacking = missing_modules(python, wanted, timeout_s) if wanted else []
        if isinstance(lacking, str):
            problems += [f"{name}: {lacking}" for name in kernels]
            continue
        for name, modules in kernels.items():
            gone = [m for m in modules if m in lacking]
            if gone:
                problems.append(f"{name}: {python} has no module {', '.join(gone)}")
    started: dict[str, float | str] = {}
    if start_env is not None and not problems:
        dirs = kernel_dirs(kernelspec_path)
        started = start_kernels(sorted(specs), dirs, start_env, start_timeout_s, ours_written)
        problems += [f"{name}: {why}" for name, why in started.items() if isinstance(why, str)]
    if problems:
        return Check(
            "Kernels",
            FAIL,
            "; ".join(problems),
            "Install what is missing in that environment, or fix argv in the kernelspec's "
            "kernel.json (jupyter kernelspec list shows where it is); a kernel that dies as it "
            "starts shows its whole output when started by hand with that argv.",
        )
    if missing_ours:
        return Check(
            "Kernels",
            WARN,
            "ScaleLab's kernels are not installed where the servers look: "
            + ", ".join(missing_ours),
            "Run scalelab kernels install --prefix <the servers' Python prefix>, or set "
            "c.ScaleLabSpawner.kernelspec_path.",
        )
    if started:
        times = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in sorted(started.items()))
        return Check("Kernels", OK, f"{len(specs)} kernels start and answer: {times}")
    return Check("Kernels", OK, f"{len(specs)} kernels ready: {', '.join(sorted(specs))}")
