"""ScaleLab: a JupyterHub extension bundle for teaching and doing deep learning on big data.

One way in: :func:`configure` installs ScaleLab into a hub configuration. Each subpackage is
run by one kind of process: :mod:`scalelab.commands`, :mod:`scalelab.hub_ext`,
:mod:`scalelab.spawner`, :mod:`scalelab.kernels`, :mod:`scalelab.store`, and the shared leaves
:mod:`scalelab.common` and :mod:`scalelab.envvars` (docs/architecture.md, "Layout").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traitlets.config import Config

__version__ = "0.1.0"


def configure(c: Config) -> Config:
    """Install ScaleLab into the JupyterHub configuration ``c``; call it last in
    ``jupyterhub_config.py``. See :func:`scalelab.hub_ext.hub.install.configure`.

    Raises
    ------
    scalelab.hub_ext.hub.config_check.ConfigProblem
        A ScaleLab setting is misspelt or not valid (in a starting hub: logged, exit status 1).
    """
    from scalelab.hub_ext.hub.install import configure as install

    return install(c)
