"""ScaleLab's course spawner layer, GPU allocation and queue (``scalelab.spawner``).

Pure logic, apart from any I/O:

- :mod:`~scalelab.spawner.ledger` -- which server holds which GPU (never one GPU twice);
- :mod:`~scalelab.spawner.policy` -- GPU limits per server, user, group and from a date;
- :mod:`~scalelab.spawner.queue` -- the fair queue, positions and estimated waits;
- :mod:`~scalelab.spawner.profiles` -- profiles and validation of untrusted ``user_options``;
- :mod:`~scalelab.spawner.environment` -- configuration -> a server's environment.

On the hub's event loop:

- :mod:`~scalelab.spawner.gpu_source` -- where GPUs and their readings come from (NVML, or
  declared in the configuration), asked in a worker thread;
- :mod:`~scalelab.spawner.allocator` -- ledger, limits and queue behind one lock;
- :mod:`~scalelab.spawner.gpu_pool` -- the hub's one GPU pool: allocator, inventory, policy,
  source, saved queue;
- :mod:`~scalelab.spawner.gpu_spawner` -- GPU profiles, allocation and queue of a spawner;
- :mod:`~scalelab.spawner.refusals` -- refused server options: the 400, one warning line;
- :mod:`~scalelab.spawner.course` -- :class:`CourseSpawnerMixin`, the course layer any
  JupyterHub spawner can take (store, Spark, kernels, Livy, GPUs);
- :mod:`~scalelab.spawner.local` -- :class:`ScaleLabSpawner`, course servers as local processes;
- :mod:`~scalelab.spawner.validation` -- :func:`validate_spawner_config`, a spawner class's
  settings checked before the hub starts;
- :mod:`~scalelab.common.gpu_inventory` -- the GPU inventory (NVML discovery, declared GPUs);
- :mod:`~scalelab.spawner.queue_store` -- the GPU queue saved across hub restarts;
- :mod:`~scalelab.spawner.hubstart` -- the hub-start work: the pool built, the saved queue
  started again;
- :mod:`~scalelab.spawner.server_logs` -- each local server's output in a file of its own;
- :mod:`~scalelab.spawner.homes` -- homes under ``home_root``;
- :mod:`~scalelab.spawner.system_users` -- a system user per student (``jupyter-<name>``), made
  on first start, with its private home and store folder;
- :mod:`~scalelab.spawner.store_identity` -- who each student's server is to the course store
  (the hub's options, a per-student S3 key, the student as the HDFS user);
- :mod:`~scalelab.spawner.kube` -- granted GPUs as KubeSpawner settings (pure);
- :mod:`~scalelab.spawner.metrics` -- Prometheus series of the GPUs.

Registered as ``scalelab`` under the ``jupyterhub.spawners`` entry point, so
``c.JupyterHub.spawner_class = "scalelab"`` selects it.
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
