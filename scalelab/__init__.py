"""ScaleLab: a JupyterHub extension bundle for teaching and doing deep learning on big data.

One way in: :func:`configure` installs ScaleLab into a hub configuration (``scalelab up`` and
an operator's own ``jupyterhub_config.py`` both end with ``scalelab.configure(c)``).

Subpackages, each run by one kind of process (docs/architecture.md, "Layout", maps them onto
the repository's folders and says which may import which):

- :mod:`scalelab.commands` -- the ``scalelab`` command's verbs (:mod:`scalelab.cli`);
- :mod:`scalelab.hub_ext` -- the hub process (``hub``), hub services (``services``), the
  single-user server extension (``server``) and the labs (``labs``);
- :mod:`scalelab.spawner` -- the course spawner layer, GPU allocation and queue;
- :mod:`scalelab.kernels` -- kernelspecs and each kernel's start-up;
- :mod:`scalelab.store` -- the course store: access, data sets, streaming;
- :mod:`scalelab.common` and :mod:`scalelab.envvars` -- leaves every process shares;
- ``scalelab.notebooks`` (the labs) and ``scalelab.templates`` (Jinja pages): package data.
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
