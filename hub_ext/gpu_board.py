"""Deprecated path of the GPU board; it moved to :mod:`scalelab.hub_ext.hub.gpu_board`.

Kept for one release, for ``jupyterhub_config.py`` files that register
``scalelab.hub_ext.gpu_board.handlers()`` (a ``FutureWarning`` says so). Call
``scalelab.configure(c)`` instead: it registers the board and everything else ScaleLab needs.
"""

import warnings

from scalelab.hub_ext.hub.gpu_board import handlers

warnings.warn(
    "scalelab.hub_ext.gpu_board is deprecated and will be removed in the next release: call "
    "scalelab.configure(c) at the end of jupyterhub_config.py instead",
    FutureWarning,
    stacklevel=2,
)

__all__ = ["handlers"]
