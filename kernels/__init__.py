"""ScaleLab's kernels (``scalelab.kernels``): "PySpark", "TensorFlow" and "PyTorch".

Run inside each kernel process; the spawner and the commands read only the settings modules
(``specs``, ``spark_defaults``, ``livy``). Nothing here imports ``scalelab.hub_ext``.

- :mod:`~scalelab.kernels.specs` -- kernelspecs built by pure functions, and their install;
- :mod:`~scalelab.kernels.specmanager` -- a kernelspec manager whose allow-list also holds for
  starting kernels;
- :mod:`~scalelab.kernels.spark_defaults` -- Spark's defaults and the session's settings (pure);
- :mod:`~scalelab.kernels.startup` -- what each kernel does when it starts (``spark``, ``store``,
  the banner, GPU session warnings);
- :mod:`~scalelab.kernels.import_order` -- Triton loaded before TensorFlow (a native clash that
  kills a kernel using both);
- :mod:`~scalelab.kernels.spark_session` -- ``spark`` built in a background thread;
- :mod:`~scalelab.kernels.spark_errors` -- Spark failures explained, with the setting to change;
- :mod:`~scalelab.kernels.notices` -- notices from the hub printed before the next cell;
- :mod:`~scalelab.kernels.livy` -- sparkmagic's remote Spark kernels (``c.LivySettings``).
"""

from scalelab.kernels.specs import KERNEL_NAMES, install_kernelspecs, kernelspec

__all__ = ["KERNEL_NAMES", "install_kernelspecs", "kernelspec"]
