"""Refused server options: the client's 400 (or 409) as before, one warning line in the hub log.

:func:`refuse` logs the one line (naming the user and the reason) and returns the
:class:`OptionsRefused` to raise; :class:`QuietEchoes`, put on the hub log's handlers, drops
JupyterHub's and tornado's echoes of it within :data:`ECHO_WINDOW_S` seconds.
Why: docs/design-notes.md, scalelab.spawner.refusals.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from tornado import web

#: Seconds after a refusal during which a warning or error repeating its message is an echo.
ECHO_WINDOW_S = 60.0
#: Refusal messages remembered at most (a flood of distinct ones forgets the oldest first).
MAX_REMEMBERED = 1000
#: Attribute of ScaleLab's own refusal record, which :class:`QuietEchoes` always lets pass.
_OWN = "scalelab_refusal"


class OptionsRefused(web.HTTPError):
    """Server options refused with a 4xx status; the message says what is wrong.

    An ordinary ``tornado.web.HTTPError`` to JupyterHub (the client gets ``status_code`` and
    the message); raised only through :func:`refuse`, which logged the one line about it.
    """


def refuse(
    log: logging.Logger | logging.LoggerAdapter,
    user_name: str,
    server_name: str,
    status: int,
    message: str,
    action: str = "start",
) -> OptionsRefused:
    """Log the one warning line of a refusal and return the error to raise.

    Parameters
    ----------
    log
        The hub's log (a spawner's or a handler's ``log``).
    user_name, server_name
        Whose server (``""``: the default server); the line names both.
    status
        HTTP status, 4xx: 400 bad options, 409 the user's GPU share is in use.
    message
        What the client is told; untrusted values in it already cut short.
    action
        What was refused: ``"start"`` (a spawn) or ``"PATCH"``.

    Returns
    -------
    OptionsRefused
        With ``status`` and ``message``, for the caller to raise.
    """
    if not 400 <= status < 500:
        raise ValueError(f"a refusal is a 4xx status, not {status}")
    _remember(message)
    install_quiet_echoes(log)
    server = f", server {server_name!r}" if server_name else ""
    log.warning(
        "Refused a %s for user %s%s (HTTP %d): %s",
        action,
        user_name,
        server,
        status,
        message,
        extra={_OWN: True},
    )
    return OptionsRefused(status, "%s", message)


# -- JupyterHub's and tornado's echoes of a refusal --------------------------------------------

_recent: OrderedDict[str, float] = OrderedDict()  # message -> when its echo window ends


def _remember(message: str) -> None:
    _recent.pop(message, None)
    _recent[message] = time.monotonic() + ECHO_WINDOW_S
    while len(_recent) > MAX_REMEMBERED:
        _recent.popitem(last=False)


def _live_messages() -> list[str]:
    now = time.monotonic()
    while _recent and next(iter(_recent.values())) < now:  # the oldest first
        _recent.popitem(last=False)
    return [message for message, until in _recent.items() if until >= now]


class QuietEchoes(logging.Filter):
    """Drops the hub's echoes of a refusal (see the module docstring); passes everything else."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _OWN, False) or record.levelno < logging.WARNING:
            return True
        if record.exc_info and isinstance(record.exc_info[1], OptionsRefused):
            return False
        messages = _live_messages()
        if not messages:
            return True
        try:
            text = record.getMessage()
        except (TypeError, ValueError):  # a malformed record is not ours to judge
            return True
        return not any(message in text for message in messages)


_QUIET = QuietEchoes()


def install_quiet_echoes(log: logging.Logger | logging.LoggerAdapter) -> None:
    """Put :class:`QuietEchoes` on every handler that writes ``log``'s records (once each)."""
    logger: logging.Logger | None = getattr(log, "logger", log)  # a LoggerAdapter's logger
    while logger is not None:
        for handler in logger.handlers:
            if _QUIET not in handler.filters:
                handler.addFilter(_QUIET)
        if not logger.propagate:
            break
        logger = logger.parent
