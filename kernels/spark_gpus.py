"""GPUs for Spark from the student's allocation: the GPUs the server holds, and only those.

In local mode the PySpark session declares the server's GPUs (``SCALELAB_GPUS``) to Spark:
``spark.driver.resource.gpu.amount`` and a discovery script answering addresses ``0 .. N-1``,
indices into ``CUDA_VISIBLE_DEVICES``. A CPU-only server declares none.
Why: docs/design-notes.md, scalelab.kernels.spark_gpus.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from scalelab import envvars

#: Values of ``CUDA_VISIBLE_DEVICES`` that mean no GPU.
NO_GPU = ("-1", "none", "void")


def granted_gpus(environ: Mapping[str, str]) -> list[str]:
    """The GPUs the server holds, in order: ``SCALELAB_GPUS`` (ScaleLab's spawner) first, else
    ``CUDA_VISIBLE_DEVICES`` (another spawner, or by hand); ``""``, ``-1``, ``none`` and
    ``void`` mean none (pure)."""
    raw = environ.get(envvars.GPUS) or environ.get("CUDA_VISIBLE_DEVICES", "")
    return [g.strip() for g in raw.split(",") if g.strip() and g.strip().lower() not in NO_GPU]


def discovery_output(count: int) -> str:
    """What the discovery script prints for ``count`` GPUs: Spark's resource JSON with the
    addresses ``"0" .. "count-1"`` (pure)."""
    return json.dumps({"name": "gpu", "addresses": [str(i) for i in range(count)]})


def discovery_script(count: int) -> str:
    """A ``/bin/sh`` discovery script that prints :func:`discovery_output` (pure)."""
    return f"#!/bin/sh\necho '{discovery_output(count)}'\n"


def gpu_conf(gpus: list[str], master: str, script: str) -> dict[str, str]:
    """Spark settings that give the session the server's ``gpus`` (pure).

    Parameters
    ----------
    gpus
        The UUIDs the server holds (:func:`granted_gpus`).
    master
        ``spark.master``: only a local master runs its tasks on the server's GPUs; on a
        cluster (``spark://``, ``yarn``) executors get the cluster's own GPUs, not these.
    script
        Path of the discovery script (written by :func:`write_discovery_script`).

    Returns
    -------
    dict
        ``spark.driver.resource.gpu.amount`` and ``.discoveryScript``; empty for no GPU or a
        cluster master.
    """
    if not gpus or not master.startswith("local"):
        return {}
    return {
        "spark.driver.resource.gpu.amount": str(len(gpus)),
        "spark.driver.resource.gpu.discoveryScript": script,
    }


def write_discovery_script(folder: Path, count: int) -> Path:
    """Write :func:`discovery_script` for ``count`` GPUs to ``folder/.gpu-discovery-<count>.sh``,
    executable by its owner only (mode 0700); returns its path.

    Raises
    ------
    OSError
        The folder cannot be written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".gpu-discovery-{count}.sh"
    path.write_text(discovery_script(count))
    path.chmod(0o700)
    return path
