"""Inside each single-user server: ScaleLab's jupyter_server extension.

:mod:`~scalelab.hub_ext.server.extension` holds its entry points; the other modules are the
course store as a folder of the home, the Spark UI route and page, the warm Spark driver, the
labs page, live logs, notices and the GPU report (docs/architecture.md, "Every module").
"""
