"""The course labs (``scalelab.hub_ext.labs``).

- :mod:`~scalelab.hub_ext.labs.release` -- student versions from the instructor's notebooks
  (``scalelab labs release``);
- :mod:`~scalelab.hub_ext.labs.sync` -- delivering them into a student's home without ever
  overwriting the student's work (run by the server extension and ``scalelab labs sync``).
"""
