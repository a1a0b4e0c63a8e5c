"""ScaleLab's JupyterHub extensions (``scalelab.hub_ext``), one subpackage per process.

- :mod:`scalelab.hub_ext.hub` -- code that runs inside the hub process: :func:`configure`
  (installs ScaleLab into a hub config), the configuration check, the GPU board and the ops'
  server-log pages;
- :mod:`scalelab.hub_ext.services` -- hub services, each in a process of its own: the GPU
  monitor, jupyterhub-idle-culler's settings and the JupyterLab toast, behind a guard that ends
  them with the hub;
- :mod:`scalelab.hub_ext.server` -- the jupyter_server extension inside each single-user
  server: the store drive, the labs page, live logs, notices;
- :mod:`scalelab.hub_ext.labs` -- the course labs: the instructor's release tool and their
  delivery into a student's home.
"""
