"""``scalelab doctor``'s check of the kernels the servers will offer.

Each kernelspec the servers see (``c.ScaleLabSpawner.kernelspec_path``, then Jupyter's own data
folders; ScaleLab's three as ``scalelab up`` writes them where its folder has none yet) must name
an interpreter that runs and has its kernel's modules (``ipykernel_launcher``, ScaleLab's start-up,
and the flavour's library: ``pyspark``, ``tensorflow``, ``torch``). A broken one otherwise
reaches the student as HTTP 500 "Unhandled error" when the notebook opens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from scalelab.commands.doctor_report import FAIL, OK, WARN, Check

#: Seconds the interpreter of one environment may take to look up its modules.
LOOKUP_TIMEOUT_S = 60.0
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
    from jupyter_core.paths import jupyter_path

    dirs = [os.path.join(d, "kernels") for d in kernelspec_path] + jupyter_path("kernels")
    manager = KernelSpecManager(kernel_dirs=dirs)
    return manager.get_all_specs()


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


def check_kernels(
    kernelspec_path: Sequence[str],
    up_writes: str | None = None,
    server_python: str = sys.executable,
    timeout_s: float = LOOKUP_TIMEOUT_S,
) -> Check:
    """Each kernelspec the servers will offer: its interpreter runs and has its modules.

    ``kernelspec_path`` is ``c.ScaleLabSpawner.kernelspec_path``. ``up_writes`` is the folder
    ``scalelab up`` writes ScaleLab's kernelspecs to at each start (its state folder's): when it
    is on the path, ScaleLab's kernels are checked as ``scalelab up`` will write them. Otherwise
    a ScaleLab kernel that no folder holds is a warning (``scalelab kernels install``).
    """
    from scalelab.kernels.specs import FLAVOURS, kernel_name, kernelspec

    specs = {name: found["spec"] for name, found in visible_specs(kernelspec_path).items()}
    if up_writes is not None and up_writes in kernelspec_path:
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
    if problems:
        return Check(
            "Kernels",
            FAIL,
            "; ".join(problems),
            "Install what is missing in that environment, or fix argv in the kernelspec's "
            "kernel.json (jupyter kernelspec list shows where it is).",
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
    return Check("Kernels", OK, f"{len(specs)} kernels ready: {', '.join(sorted(specs))}")
