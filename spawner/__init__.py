"""ScaleLab's course spawner layer, GPU allocation and queue (``scalelab.spawner``).

Pure logic (ledger, policy, queue, profiles, environment) apart from what runs on the hub's
event loop (GPU sources, allocator, pool, the spawners and their course layer); the modules are
listed in docs/architecture.md, "Every module". Registered as ``scalelab`` under the
``jupyterhub.spawners`` entry point: ``c.JupyterHub.spawner_class = "scalelab"`` selects it.
"""

from scalelab.common.gpu_inventory import GPU, GPUInventory, discover_gpus
from scalelab.spawner.course import CourseSpawnerMixin
from scalelab.spawner.local import ScaleLabSpawner
from scalelab.spawner.validation import validate_spawner_config

__all__ = [
    "GPU",
    "CourseSpawnerMixin",
    "GPUInventory",
    "ScaleLabSpawner",
    "discover_gpus",
    "validate_spawner_config",
]
