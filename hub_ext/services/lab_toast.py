"""The idle-GPU warning as a JupyterLab notification (the toast in the bottom right).

:func:`idle_gpu_warning` and :func:`idle_gpu_withdrawn` are the payloads (pure);
:func:`post_toast` posts one to the server's ``jupyterlab-notifications-extension``, with
``no_track_activity`` so that it never counts as the student's activity.
Why: docs/design-notes.md, scalelab.hub_ext.services.lab_toast.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import requests

from scalelab.hub_ext.services.culling import _duration

#: Path of the notifications extension's ingest handler, below a server's URL.
INGEST_PATH = "jupyterlab-notifications-extension/ingest"

#: JupyterLab's toasts show at most this many characters of a message.
TOAST_VISIBLE_CHARS = 140

#: How long the "in use again" notice stays on screen, in milliseconds.
WITHDRAWN_AUTO_CLOSE_MS = 15_000


def stop_time_utc(stop_at: float) -> str:
    """``"HH:MM UTC"`` of ``stop_at`` (seconds since the epoch), rounded up to the minute.

    Rounded up so the student is never told a time earlier than the stop.
    """
    when = dt.datetime.fromtimestamp(stop_at, dt.UTC)
    if when.second or when.microsecond:
        when = when.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    return when.strftime("%H:%M UTC")


def idle_gpu_warning(
    gpus: list[str] | tuple[str, ...], idle_s: float, stop_at: float, now: float
) -> dict[str, Any]:
    """The ingest payload of an idle-GPU warning.

    JupyterLab cuts a toast's text at 140 characters, so the message is short and puts the
    facts first: the GPUs, how long they were idle, when the server stops (as a UTC clock time,
    since a toast may be read minutes after it appeared, and as a duration). With one GPU
    (a 40-character NVML UUID) it fits whole; the full sentence is the kernels' notice.

    Parameters
    ----------
    gpus
        UUIDs of the server's GPUs.
    idle_s
        Seconds the GPUs have been idle.
    stop_at
        When the server will be stopped, in seconds since the epoch.
    now
        The present, in seconds since the epoch.

    Returns
    -------
    dict
        ``{"message": str, "type": "warning", "autoClose": False, "immediate": True}``: a
        warning that stays until the student dismisses it.
    """
    message = (
        f"ScaleLab: GPU {', '.join(gpus)} idle for {_duration(idle_s)}: your server stops at "
        f"about {stop_time_utc(stop_at)} (in {_duration(max(stop_at - now, 0))}); "
        "files are kept."
    )
    return {"message": message, "type": "warning", "autoClose": False, "immediate": True}


def idle_gpu_withdrawn(gpus: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """The ingest payload that calls off an earlier warning: the GPUs are in use again."""
    message = (
        f"ScaleLab: your GPU(s) {', '.join(gpus)} are in use again; your server will not be "
        "stopped for GPU idleness."
    )
    return {
        "message": message,
        "type": "info",
        "autoClose": WITHDRAWN_AUTO_CLOSE_MS,
        "immediate": True,
    }


def post_toast(session: requests.Session, server_url: str, payload: dict[str, Any]) -> None:
    """Post ``payload`` to the notifications extension of the server at ``server_url``.

    Parameters
    ----------
    session
        Carries the monitor's hub token (``access:servers``).
    server_url
        The server's own URL, ending in ``/`` (``http://127.0.0.1:PORT/user/NAME/``).

    Raises
    ------
    requests.RequestException
        The server did not answer, or answered an error (404: the extension is not installed
        or is disabled in that server).
    """
    response = session.post(
        server_url + INGEST_PATH, params={"no_track_activity": "1"}, json=payload, timeout=30
    )
    response.raise_for_status()
