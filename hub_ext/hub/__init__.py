"""Inside the hub process (``scalelab.hub_ext.hub``).

- :mod:`~scalelab.hub_ext.hub.install` -- :func:`scalelab.configure`: ScaleLab into a hub config;
- :mod:`~scalelab.hub_ext.hub.config_check` -- the hub configuration compiled, loaded, validated;
- :mod:`~scalelab.hub_ext.hub.registry` -- ScaleLab's configuration classes, in one list;
- :mod:`~scalelab.hub_ext.hub.gpu_board` -- the admins' GPU board (page and REST);
- :mod:`~scalelab.hub_ext.hub.server_logs` -- the admins' live logs of users' servers;
- :mod:`~scalelab.hub_ext.hub.server_patch` -- the server API's PATCH: a 400 for bad fields.
"""
