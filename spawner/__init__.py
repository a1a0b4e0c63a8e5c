"""ScaleLab's GPU-aware spawner (``scalelab.spawner``).

- :mod:`scalelab.spawner.inventory` -- GPUs found through NVML (none on a CPU-only host);
- :mod:`scalelab.spawner.environment` -- pure functions: configuration -> server environment;
- :mod:`scalelab.spawner.local` -- :class:`ScaleLabSpawner`, single-user servers as local processes.

Registered as ``scalelab`` under the ``jupyterhub.spawners`` entry point, so
``c.JupyterHub.spawner_class = "scalelab"`` selects it.
"""

from scalelab.spawner.inventory import GPU, GPUInventory, discover_gpus
from scalelab.spawner.local import ScaleLabSpawner

__all__ = ["GPU", "GPUInventory", "ScaleLabSpawner", "discover_gpus"]
