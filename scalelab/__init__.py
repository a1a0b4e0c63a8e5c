"""ScaleLab: a JupyterHub extension bundle for teaching and doing deep learning on big data.

Subpackages: :mod:`scalelab.spawner`, :mod:`scalelab.hub_ext`, :mod:`scalelab.kernels`,
:mod:`scalelab.store`; the labs in ``scalelab.notebooks`` and page templates in
``scalelab.templates``. See README.md for how the repository's folders map onto them.
"""

__version__ = "0.1.0"
