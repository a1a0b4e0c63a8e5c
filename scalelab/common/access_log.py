"""ScaleLab's own services' successful requests at debug level in the access log.

The GPU monitor asks the hub (users, GPU board, proxy) and every running server (its kernels)
each ``poll_interval`` (60 s); the idle culler asks the hub each ``cull_every``. JupyterHub's
access log (``jupyterhub.log.log_request``, a single-user server's too) writes every 2xx at info,
so each server's log got a line a minute and the hub's three a minute, also on a hub without GPUs;
each GPU server's readings (``gpu_report_interval``) added one more to the hub's.
:class:`QuietServiceRequests` moves such a record to debug when the request succeeded (2xx),
took under a second and came from one of :data:`SERVICE_NAMES` or went to one of
:data:`PERIODIC_PATHS`; every other request (a student's, a redirect, an error, a slow one)
stays as it was.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

#: The services ScaleLab adds to the hub (``scalelab.hub_ext.services.culling``); also the names
#: of their roles.
SERVICE_NAMES = ("scalelab-gpu-monitor", "scalelab-idle-culler")

#: Routes that servers call on their own every few seconds (``scalelab.hub_ext.hub.gpu_reports``).
PERIODIC_PATHS = (re.compile(r"/hub/api/scalelab/users/[^/?]+/gpu-readings(\?|$)"),)

#: The logger of JupyterHub's and Jupyter Server's access lines.
ACCESS_LOGGER = "tornado.access"

#: A request JupyterHub's ``log_request`` logged at info only because it succeeded; it logs a
#: request of 1 s or more at info anyway, and that one is kept.
_LINE = re.compile(r"^2\d\d [A-Z]+ (?P<path>\S+) \((?P<who>[^@()]*)@[^)]*\) (?P<ms>[\d.]+)ms")


class QuietServiceRequests(logging.Filter):
    """A filter for :data:`ACCESS_LOGGER`: the services' quick 2xx lines at debug level, shown
    only where that logger is enabled for debug (``--debug``, ``log_level = "DEBUG"``)."""

    def __init__(
        self,
        services: Iterable[str] = SERVICE_NAMES,
        paths: Iterable[re.Pattern[str]] = PERIODIC_PATHS,
    ):
        super().__init__()
        self.services = frozenset(services)
        self.paths = tuple(paths)

    def _routine(self, path: str, who: str) -> bool:
        return who in self.services or any(p.search(path) for p in self.paths)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return True
        match = _LINE.match(record.getMessage())
        if (
            match is None
            or float(match["ms"]) >= 1000
            or not self._routine(*match.group("path", "who"))
        ):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def quiet_service_requests(logger: logging.Logger | None = None) -> QuietServiceRequests:
    """Add :class:`QuietServiceRequests` to ``logger`` (default: :data:`ACCESS_LOGGER`), once
    however often it is called; returns the filter in place."""
    logger = logger or logging.getLogger(ACCESS_LOGGER)
    for existing in logger.filters:
        if isinstance(existing, QuietServiceRequests):
            return existing
    quiet = QuietServiceRequests()
    logger.addFilter(quiet)
    return quiet
