"""The hand-in client: a student's server (or a terminal of it) talks to the hub's hand-in API
(:mod:`scalelab.hub_ext.hub.submissions`) with the server's own ``JUPYTERHUB_API_TOKEN``.

Used by ``scalelab submit`` / ``scalelab submissions`` and by the server extension's Hand In page.
Why: docs/design-notes.md, scalelab.hub_ext.labs.handin.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from urllib.parse import quote, urlencode

#: Seconds to wait for the hub's answer (it writes the notebook to the course store).
HUB_TIMEOUT_S = 120.0


class HandInFailed(Exception):
    """The hand-in or the listing did not happen; the message says why and what to do."""


def hub_of(environ: Mapping[str, str]) -> tuple[str, str, str]:
    """(API URL, token, user) of the server this process runs in.

    Raises
    ------
    HandInFailed
        Not in a course server (the variables are unset).
    """
    values = [environ.get(k, "") for k in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN")]
    user = environ.get("JUPYTERHUB_USER", "")
    if not all(values) or not user:
        raise HandInFailed(
            "this is not a terminal of a course server (JUPYTERHUB_API_URL, "
            "JUPYTERHUB_API_TOKEN and JUPYTERHUB_USER are unset): open a terminal in your "
            "JupyterLab on the course hub and run the command there."
        )
    return values[0].rstrip("/"), values[1], user


def _call(method: str, url: str, token: str, body: bytes | None = None) -> dict:
    return json.loads(_request(method, url, token, body) or b"{}")


def _request(method: str, url: str, token: str, body: bytes | None = None) -> bytes:
    request = urllib.request.Request(
        url,
        data=body,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=HUB_TIMEOUT_S) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read() or b"{}").get("message", "")
        except ValueError:
            message = ""
        raise HandInFailed(message or f"the hub answered HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise HandInFailed(
            f"the hub could not be reached ({exc}); nothing was handed in: try again in a minute."
        ) from None


def lab_of(name: str) -> str:
    """``name`` without a trailing ``.ipynb``."""
    return name.removesuffix(".ipynb")


def send(lab: str, content: bytes, environ: Mapping[str, str] = os.environ) -> dict:
    """Hand in ``content`` (a notebook's bytes) as ``lab``; the hub's receipt (a dict, see
    :class:`~scalelab.hub_ext.labs.handin.Receipt`). One HTTP request, up to
    :data:`HUB_TIMEOUT_S` seconds.

    Raises
    ------
    HandInFailed
        Not in a course server, or the hub refused (its message says why) or did not answer.
    """
    api, token, user = hub_of(environ)
    url = f"{api}/scalelab/users/{quote(user, safe='')}/submissions/{quote(lab_of(lab), safe='')}"
    return _call("POST", url, token, content)


def submissions(lab: str | None, environ: Mapping[str, str] = os.environ) -> list[dict]:
    """The receipts of one's versions (of ``lab``, or of every lab), oldest first.

    Raises
    ------
    HandInFailed
        As :func:`send`.
    """
    api, token, user = hub_of(environ)
    url = f"{api}/scalelab/users/{quote(user, safe='')}/submissions"
    if lab:
        url += "/" + quote(lab_of(lab), safe="")
    return _call("GET", url, token)["submissions"]


def receipt_line(receipt: Mapping) -> str:
    """One receipt as the student reads it (pure)."""
    when = datetime.fromisoformat(receipt["submitted_at"]).strftime("%Y-%m-%d %H:%M:%S UTC")
    if receipt.get("deadline"):
        due = datetime.fromisoformat(receipt["deadline"]).strftime("%Y-%m-%d %H:%M UTC")
        timing = f"LATE (deadline {due})" if receipt["late"] else f"on time (deadline {due})"
    else:
        timing = "no deadline"
    return (
        f"{receipt['lab']} version {receipt['version']}, handed in {when}, {timing}: "
        f"{receipt['bytes']:,} bytes, {receipt['cells']} cells, sha256 {receipt['sha256'][:12]}"
    )


def collection(api: str, token: str, lab: str, before: str | None) -> dict:
    """The hub's list of each student's version of ``lab`` to collect (an instructor's call:
    ``token`` must be a hub admin's), at or before ``before`` (ISO 8601, or ``"deadline"``).

    Raises
    ------
    HandInFailed
        The hub refused (not an admin: JupyterHub's 403) or did not answer.
    """
    url = f"{api.rstrip('/')}/scalelab/submissions/{quote(lab_of(lab), safe='')}"
    if before:
        url += "?" + urlencode({"before": before})
    return _call("GET", url, token)


def version(api: str, token: str, user: str, lab: str, stamp: str) -> bytes:
    """The notebook of ``user``'s version ``stamp`` of ``lab``, byte for byte as handed in.

    Raises
    ------
    HandInFailed
        As :func:`collection`; 404 for no such version.
    """
    parts = "/".join(quote(part, safe="") for part in (user, "submissions", lab_of(lab), stamp))
    return _request("GET", f"{api.rstrip('/')}/scalelab/users/{parts}", token)


def fetch_feedback(lab: str, environ: Mapping[str, str] = os.environ) -> bytes | None:
    """One's feedback on ``lab`` from the hub, or None while there is none.

    Raises
    ------
    HandInFailed
        Not in a course server, or the hub refused or did not answer.
    """
    api, token, user = hub_of(environ)
    parts = f"{quote(user, safe='')}/feedback/{quote(lab_of(lab), safe='')}"
    try:
        return _request("GET", f"{api}/scalelab/users/{parts}", token)
    except HandInFailed as exc:
        if str(exc).startswith("No feedback on"):
            return None
        raise


def return_feedback(api: str, token: str, user: str, lab: str, content: bytes) -> None:
    """Return ``content`` (a feedback notebook) to ``user`` for ``lab`` (an instructor's call:
    ``token`` must be a hub admin's).

    Raises
    ------
    HandInFailed
        The hub refused or did not answer.
    """
    parts = f"{quote(user, safe='')}/feedback/{quote(lab_of(lab), safe='')}"
    _request("PUT", f"{api.rstrip('/')}/scalelab/users/{parts}", token, content)


def place_feedback(folder: Path, lab: str, content: bytes) -> Path:
    """Write ``content`` into ``folder`` as ``<lab>-feedback.ipynb``, never over a different
    file: the same bytes already there are that file; otherwise ``<lab>-feedback (2).ipynb``,
    ``(3)``... (created exclusively). Returns the path.

    Raises
    ------
    OSError
        The folder cannot be written (full disk: the message says so).
    """
    from scalelab.hub_ext.labs.handin import HandInError, check_lab_name

    try:
        base = f"{check_lab_name(lab)}-feedback"
    except HandInError as exc:
        raise OSError(str(exc)) from None
    for attempt in range(1, 1000):
        path = folder / (f"{base}.ipynb" if attempt == 1 else f"{base} ({attempt}).ipynb")
        try:
            with path.open("xb") as handle:
                handle.write(content)
            return path
        except FileExistsError:
            if path.is_file() and path.read_bytes() == content:
                return path
    raise OSError(f"too many {base} (N).ipynb files in {folder}: remove some")
