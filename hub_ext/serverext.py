"""Deprecated path of ScaleLab's jupyter_server extension; it moved to
:mod:`scalelab.hub_ext.server.extension`.

Kept for one release, so that a ``jupyter_server_config.d`` file that still enables
``scalelab.hub_ext.serverext`` loads the extension (with a ``FutureWarning``). Enable
``scalelab.hub_ext.server.extension`` instead (ScaleLab's installed ``scalelab.json`` does).
"""

import warnings

from scalelab.hub_ext.server.extension import (
    _link_jupyter_server_extension,
    _load_jupyter_server_extension,
)

warnings.warn(
    "scalelab.hub_ext.serverext is deprecated and will be removed in the next release: enable "
    "scalelab.hub_ext.server.extension in jupyter_server_config.d instead",
    FutureWarning,
    stacklevel=2,
)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "scalelab.hub_ext.server.extension"}]


__all__ = ["_link_jupyter_server_extension", "_load_jupyter_server_extension"]
