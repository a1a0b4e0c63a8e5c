"""ScaleLab's kernels (``scalelab.kernels``): "PySpark", "TensorFlow" and "PyTorch".

Run inside each kernel process; the spawner and the commands read only the settings modules
(``specs``, ``spark_defaults``, ``livy``). Nothing here imports ``scalelab.hub_ext``. The
modules are listed in docs/architecture.md, "Every module".
"""

from scalelab.kernels.specs import KERNEL_NAMES, install_kernelspecs, kernelspec

__all__ = ["KERNEL_NAMES", "install_kernelspecs", "kernelspec"]
