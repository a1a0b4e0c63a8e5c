"""Leaves shared by every process (``scalelab.common``): they import nothing else of ScaleLab.

- :mod:`~scalelab.common.atomicfile` -- write a file whole or not at all;
- :mod:`~scalelab.common.classsetting` -- a setting that names a class (a class or its import path);
- :mod:`~scalelab.common.strictconfig` -- configuration classes that refuse misspelt settings;
- :mod:`~scalelab.common.logfiles` -- where a server's and its Spark drivers' logs live;
- :mod:`~scalelab.common.pdeathsig` -- children that end when their parent dies (Linux).
"""
