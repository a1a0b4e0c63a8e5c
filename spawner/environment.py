"""Pure functions: the hub's configuration -> a single-user server's environment and arguments.

Each setting keeps one name along the whole path: ``ScaleLabSpawner.store_url`` becomes
``SCALELAB_STORE_URL`` in the server, which the server extension and the kernels read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scalelab import envvars
from scalelab.kernels.specs import KERNEL_NAMES


def server_environment(
    *,
    store_url: str,
    store_options: Mapping[str, Any],
    spark_master: str,
    spark_driver_memory: str,
    spark_conf: Mapping[str, str] | None = None,
    hadoop_conf_dir: str = "",
    gpu_uuids: Sequence[str] = (),
    jupyter_path: Iterable[str] = (),
    inherited_jupyter_path: str = "",
) -> dict[str, str]:
    """Environment variables ScaleLab adds to a single-user server.

    Parameters
    ----------
    store_url, store_options
        The course store (``ScaleLabSpawner.store_url`` / ``.store_options``).
    spark_master, spark_driver_memory
        Spark settings for the PySpark kernel, e.g. ``"local[*]"`` and ``"2g"``.
    spark_conf
        Further ``spark.*`` settings of the kernel's session (``SCALELAB_SPARK_CONF``, JSON).
    hadoop_conf_dir
        The Hadoop client configuration folder, as ``HADOOP_CONF_DIR`` and ``YARN_CONF_DIR``;
        empty: neither is set.
    gpu_uuids
        NVML UUIDs of the GPUs the server holds; empty for a CPU-only server.
    jupyter_path
        Folders with ScaleLab's kernelspecs (``<dir>/kernels/<name>/kernel.json``), put first on
        ``JUPYTER_PATH``.
    inherited_jupyter_path
        ``JUPYTER_PATH`` the server would otherwise get, kept after ScaleLab's folders.

    Returns
    -------
    dict
        ``SCALELAB_*`` variables, ``CUDA_VISIBLE_DEVICES`` (GPU UUIDs, comma-separated, or ``""``
        which hides every GPU), ``NVIDIA_VISIBLE_DEVICES`` when GPUs are held,
        ``HADOOP_CONF_DIR`` and ``YARN_CONF_DIR`` when ``hadoop_conf_dir`` is set, and
        ``JUPYTER_PATH``.
    """
    paths = [*jupyter_path, *filter(None, inherited_jupyter_path.split(os.pathsep))]
    env = {
        envvars.STORE_URL: store_url,
        envvars.STORE_OPTIONS: json.dumps(dict(store_options), sort_keys=True),
        envvars.SPARK_MASTER: spark_master,
        envvars.SPARK_DRIVER_MEMORY: spark_driver_memory,
        envvars.SPARK_CONF: json.dumps(dict(spark_conf or {}), sort_keys=True),
        envvars.GPUS: ",".join(gpu_uuids),
        "CUDA_VISIBLE_DEVICES": ",".join(gpu_uuids),
    }
    if hadoop_conf_dir:
        env["HADOOP_CONF_DIR"] = env["YARN_CONF_DIR"] = hadoop_conf_dir
    if gpu_uuids:  # for the NVIDIA container runtime, when servers run in containers
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(gpu_uuids)
    if paths:
        env["JUPYTER_PATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


#: Seconds between two looks for idle kernels (jupyter_server's ``cull_interval``).
KERNEL_CULL_INTERVAL_S = 60


def server_args(
    kernel_names: Iterable[str] = KERNEL_NAMES, spark_kernel_idle_timeout: int = 0
) -> list[str]:
    """Command-line arguments ScaleLab adds to ``jupyterhub-singleuser``.

    Returns
    -------
    list of str
        Restricts the server's kernels to ScaleLab's kernelspecs, so the launcher shows exactly
        "PySpark", "TensorFlow" and "PyTorch" and no other kernel can be started; the first of
        them is the default kernel. The kernel manager keeps a PySpark kernel started ahead
        (:class:`~scalelab.hub_ext.server.warm_kernel.WarmKernelManager`). With
        ``spark_kernel_idle_timeout`` (seconds, 0: never), a PySpark kernel idle that long is
        stopped, open tab or not, and leaves a notice
        (:class:`~scalelab.hub_ext.server.kernel_culling.ScaleLabKernelManager`); the cull
        interval is the timeout's half, at most :data:`KERNEL_CULL_INTERVAL_S`.
    """
    names = list(kernel_names)
    args = [
        "--ServerApp.kernel_spec_manager_class="
        "scalelab.kernels.specmanager.CourseKernelSpecManager",
        *(f"--KernelSpecManager.allowed_kernelspecs={name}" for name in names),
        f"--MappingKernelManager.default_kernel_name={names[0]}",
        "--ServerApp.kernel_manager_class=scalelab.hub_ext.server.warm_kernel.WarmKernelManager",
    ]
    if spark_kernel_idle_timeout > 0:
        interval = max(1, min(KERNEL_CULL_INTERVAL_S, spark_kernel_idle_timeout // 2))
        args += [
            f"--ScaleLabKernelManager.cull_idle_timeout={spark_kernel_idle_timeout}",
            f"--ScaleLabKernelManager.cull_interval={interval}",
            "--ScaleLabKernelManager.cull_connected=True",
        ]
    return args
