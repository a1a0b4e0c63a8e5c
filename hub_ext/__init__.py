"""ScaleLab's JupyterHub extensions (``scalelab.hub_ext``), one subpackage per process.

:mod:`~scalelab.hub_ext.hub` runs inside the hub process, :mod:`~scalelab.hub_ext.services` as
hub services in processes of their own, :mod:`~scalelab.hub_ext.server` inside each single-user
server, and :mod:`~scalelab.hub_ext.labs` releases the labs and delivers them into homes.
"""
