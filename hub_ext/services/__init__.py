"""Hub services, each run by the hub in a process of its own (``scalelab.hub_ext.services``).

- :mod:`~scalelab.hub_ext.services.culling` -- the GPU-aware culling rule (pure), its settings
  (``c.ScaleLabCulling``) and the two services' definitions;
- :mod:`~scalelab.hub_ext.services.gpu_monitor` -- the GPU monitor service;
- :mod:`~scalelab.hub_ext.services.lab_toast` -- the idle-GPU warning as a JupyterLab toast;
- :mod:`~scalelab.hub_ext.services.service_guard` -- runs a service so that it ends with the hub.

They talk to the hub and the servers over HTTP only, and import no hub or server code.
"""
