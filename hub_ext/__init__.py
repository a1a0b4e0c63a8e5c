"""ScaleLab's hub side and single-user side (``scalelab.hub_ext``).

- :mod:`scalelab.hub_ext.hubconfig` -- ``scalelab up``'s embedded defaults, as a traitlets Config;
- :mod:`scalelab.hub_ext.up` -- the ``scalelab up`` command: run a course hub on one machine;
- :mod:`scalelab.hub_ext.labs` -- copying the course labs into a student's home;
- :mod:`scalelab.hub_ext.serverext` -- the jupyter_server extension loaded by every user server.
"""
