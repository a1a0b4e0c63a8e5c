"""Every configuration class of ScaleLab, in one list: the configuration reference
(``scalelab config-reference``) and the hub's start-up check read it.

Pure data: each class is named by its module and imported only when asked for
(:meth:`ConfigClass.load`), so this leaf imports nothing of ScaleLab.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ConfigClass:
    """One configuration section, ``c.<name>``.

    Attributes
    ----------
    name
        The class name, which is the section's name.
    module
        The module that defines it.
    config_file
        ``"hub"``: set in ``jupyterhub_config.py`` and checked when the hub starts;
        ``"server"``: set in the single-user servers' ``jupyter_server_config.py``.
    includes
        Mixins whose settings the class carries (set as ``c.<name>.<setting>``).
    """

    name: str
    module: str
    config_file: Literal["hub", "server"]
    includes: tuple[str, ...] = ()

    def load(self) -> type:
        """The class itself (imports its module)."""
        return getattr(importlib.import_module(self.module), self.name)


CONFIG_CLASSES: tuple[ConfigClass, ...] = (
    ConfigClass(
        "ScaleLabSpawner",
        "scalelab.spawner.local",
        "hub",
        includes=(
            "CourseSpawnerMixin",
            "GPUSpawnerMixin",
            "StartQueueMixin",
            "ServerLogMixin",
            "SandboxSpawnerMixin",
        ),
    ),
    ConfigClass(
        "ScaleLabKubeSpawner",
        "scalelab.spawner.kube_spawner",
        "hub",
        includes=("CourseSpawnerMixin", "GPUSpawnerMixin", "StartQueueMixin"),
    ),
    ConfigClass(
        "ScaleLabSlurmSpawner",
        "scalelab.spawner.slurm",
        "hub",
        includes=("CourseSpawnerMixin", "GPUSpawnerMixin", "StartQueueMixin"),
    ),
    ConfigClass("SlurmGPUs", "scalelab.spawner.slurm", "hub", includes=("ServerReports",)),
    ConfigClass("GPUPolicy", "scalelab.spawner.policy", "hub"),
    ConfigClass("ReportedGPUs", "scalelab.common.gpu_source", "hub", includes=("ServerReports",)),
    ConfigClass("S3KeyFile", "scalelab.spawner.store_identity", "hub"),
    ConfigClass("HDFSUserIdentity", "scalelab.spawner.store_identity", "hub"),
    ConfigClass("ScaleLabCulling", "scalelab.hub_ext.services.culling", "hub"),
    ConfigClass("DirectoryGroups", "scalelab.hub_ext.hub.directory", "hub"),
    ConfigClass("LivySettings", "scalelab.kernels.livy", "hub"),
    ConfigClass("HandIn", "scalelab.hub_ext.labs.handin", "hub"),
    ConfigClass("StoreDrive", "scalelab.hub_ext.server.store_drive", "server"),
    ConfigClass("GPUReporter", "scalelab.hub_ext.server.gpu_report", "server"),
    ConfigClass("ScaleLabKernelManager", "scalelab.hub_ext.server.kernel_culling", "server"),
    ConfigClass("WarmKernelManager", "scalelab.hub_ext.server.warm_kernel", "server"),
    ConfigClass("DeclaredReadings", "scalelab.common.gpu_source", "server"),
)


def hub_classes() -> list[ConfigClass]:
    """The sections of ``jupyterhub_config.py``, in reference order."""
    return [entry for entry in CONFIG_CLASSES if entry.config_file == "hub"]
