"""ScaleLab's GPU-aware spawner (``scalelab.spawner``).

Pure logic, apart from any I/O:

- :mod:`~scalelab.spawner.ledger` -- which server holds which GPU (never one GPU twice);
- :mod:`~scalelab.spawner.policy` -- GPU limits per server, user, group and from a date;
- :mod:`~scalelab.spawner.queue` -- the fair queue, positions and estimated waits;
- :mod:`~scalelab.spawner.profiles` -- profiles and validation of untrusted ``user_options``;
- :mod:`~scalelab.spawner.environment` -- configuration -> a server's environment.

On the hub's event loop:

- :mod:`~scalelab.spawner.inventory` -- GPUs from NVML (in a thread) or declared in the config;
- :mod:`~scalelab.spawner.allocator` -- ledger, limits and queue behind one lock, per hub;
- :mod:`~scalelab.spawner.gpu_spawner` -- the mixin that gives any spawner GPU profiles;
- :mod:`~scalelab.spawner.local` -- :class:`ScaleLabSpawner`, servers as local processes.

Registered as ``scalelab`` under the ``jupyterhub.spawners`` entry point, so
``c.JupyterHub.spawner_class = "scalelab"`` selects it.
"""

from scalelab.spawner.inventory import GPU, GPUInventory, discover_gpus
from scalelab.spawner.local import ScaleLabSpawner

__all__ = ["GPU", "GPUInventory", "ScaleLabSpawner", "discover_gpus"]
