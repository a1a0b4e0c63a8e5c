"""Kernelspecs of ScaleLab's kernels, built by pure functions (after ``ipykernel/kernelspec.py``).

Each kernel is IPython (ipykernel) started with one line of ScaleLab start-up code
(:func:`scalelab.kernels.startup.start`), so everything a student can do in a Python kernel
still works. ``argv[0]`` is ``"python"``, which jupyter_client replaces with the server's own
interpreter, so the same spec works in any virtual environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Flavour -> (kernelspec name, display name, extra environment).
_FLAVOURS: dict[str, tuple[str, str, dict[str, str]]] = {
    "pyspark": ("scalelab-pyspark", "PySpark", {}),
    "tensorflow": (
        "scalelab-tensorflow",
        "TensorFlow",
        # Memory growth: a second notebook on the same GPU does not find it full.
        {"TF_FORCE_GPU_ALLOW_GROWTH": "true", "TF_CPP_MIN_LOG_LEVEL": "2"},
    ),
    "pytorch": ("scalelab-pytorch", "PyTorch", {}),
}

#: The flavours, in launcher order.
FLAVOURS: tuple[str, ...] = tuple(_FLAVOURS)
#: Kernelspec names of ScaleLab's kernels, in launcher order.
KERNEL_NAMES: tuple[str, ...] = tuple(name for name, _, _ in _FLAVOURS.values())


def kernel_name(flavour: str) -> str:
    """Kernelspec name of a flavour: ``"pyspark"`` -> ``"scalelab-pyspark"``.

    Raises
    ------
    KeyError
        The flavour is not one of :data:`FLAVOURS`.
    """
    return _FLAVOURS[flavour][0]


def kernelspec(flavour: str) -> dict[str, Any]:
    """The ``kernel.json`` content of one ScaleLab kernel.

    Parameters
    ----------
    flavour
        ``"pyspark"``, ``"tensorflow"`` or ``"pytorch"``.

    Returns
    -------
    dict
        ``argv``, ``display_name``, ``language``, ``interrupt_mode``, ``env`` and ``metadata``
        as in Jupyter's kernelspec format (jupyter_client docs, "Kernel specs").

    Raises
    ------
    KeyError
        Unknown flavour.
    """
    _, display_name, env = _FLAVOURS[flavour]
    startup = (
        "import scalelab.kernels.startup as _scalelab; "
        f"_scalelab.start({flavour!r}, globals()); del _scalelab"
    )
    return {
        "argv": [
            "python",
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            f"--IPKernelApp.exec_lines={startup}",
        ],
        "display_name": display_name,
        "language": "python",
        "interrupt_mode": "signal",
        "env": dict(env),
        "metadata": {"debugger": True, "scalelab": {"flavour": flavour}},
    }


def install_kernelspecs(data_dir: str | Path) -> list[Path]:
    """Write ScaleLab's kernelspecs under a Jupyter data folder.

    Parameters
    ----------
    data_dir
        A folder on ``JUPYTER_PATH``
        (e.g. ``<state>/share/jupyter`` or ``sys.prefix/share/jupyter``).

    Returns
    -------
    list of Path
        The ``kernels/<name>/kernel.json`` files written (rewritten when present).
    """
    written = []
    for flavour in FLAVOURS:
        folder = Path(data_dir) / "kernels" / kernel_name(flavour)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / "kernel.json"
        target.write_text(json.dumps(kernelspec(flavour), indent=1) + "\n")
        written.append(target)
    return written
