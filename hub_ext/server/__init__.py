"""Inside each single-user server: ScaleLab's jupyter_server extension.

Package ``scalelab.hub_ext.server``:


- :mod:`~scalelab.hub_ext.server.extension` -- the extension's entry points;
- :mod:`~scalelab.hub_ext.server.store_drive` -- the course store in the home's contents
  manager (jupyter-fs under the folder ``store/`` of the file browser);
- :mod:`~scalelab.hub_ext.server.store_folder` -- the mapping of ``store/<path>`` to the
  store's paths (pure);
- :mod:`~scalelab.hub_ext.server.store_contents` -- its contents manager (refusals as 403);
- :mod:`~scalelab.hub_ext.server.spark_ui` -- the Spark UI behind the hub (``sparkui/<port>/``);
- :mod:`~scalelab.hub_ext.server.spark_ui_page` -- Course > Spark UI...: the running kernels'
  Spark UIs;
- :mod:`~scalelab.hub_ext.server.labs_handlers` -- the "Get new labs" page and API;
- :mod:`~scalelab.hub_ext.server.logstream` -- live logs of the server and its Spark drivers;
- :mod:`~scalelab.hub_ext.server.notices` -- notices from the hub to the student.
"""
