"""Hub services, each run by the hub in a process of its own (``scalelab.hub_ext.services``).

The GPU-aware culling rule and its settings (:mod:`~scalelab.hub_ext.services.culling`), the
GPU monitor, the idle-GPU toast and the guard that ends a service with the hub. They talk to the
hub and the servers over HTTP only, and import no hub or server code.
"""
