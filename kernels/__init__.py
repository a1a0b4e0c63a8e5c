"""ScaleLab's kernels (``scalelab.kernels``): "PySpark", "TensorFlow" and "PyTorch".

- :mod:`scalelab.kernels.specs` -- kernelspecs built by pure functions;
- :mod:`scalelab.kernels.startup` -- what each kernel does when it starts (``spark``, ``store``).
"""

from scalelab.kernels.specs import KERNEL_NAMES, install_kernelspecs, kernelspec

__all__ = ["KERNEL_NAMES", "install_kernelspecs", "kernelspec"]
