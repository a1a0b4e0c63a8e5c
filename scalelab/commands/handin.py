"""``scalelab submit`` and ``scalelab submissions``: hand in a lab from a terminal of one's own
server, and list what was handed in, through the hub's hand-in API
(:mod:`scalelab.hub_ext.hub.submissions`) with the server's own ``JUPYTERHUB_API_TOKEN``.
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
from urllib.parse import quote

#: Seconds to wait for the hub's answer (it writes the notebook to the course store).
HUB_TIMEOUT_S = 120.0


class HandInFailed(Exception):
    """The hand-in or the listing did not happen; the message says why and what to do."""


def _hub(environ: Mapping[str, str]) -> tuple[str, str, str]:
    """(API URL, token, user) of the server this terminal runs in."""
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
    request = urllib.request.Request(
        url,
        data=body,
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=HUB_TIMEOUT_S) as response:
            return json.loads(response.read() or b"{}")
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


def notebook_for(lab: str, given: str | None, cwd: Path, home: Path) -> Path:
    """The notebook to hand in: ``given``, else ``<lab>.ipynb`` in ``cwd``, else in ``home``.

    Raises
    ------
    HandInFailed
        No such file (the message names where it looked).
    """
    name = lab if lab.endswith(".ipynb") else f"{lab}.ipynb"
    candidates = [Path(given)] if given else [cwd / name, home / name]
    for path in candidates:
        if path.is_file():
            return path
    raise HandInFailed(
        f"no notebook {' or '.join(str(p) for p in candidates)}: give its path, "
        f"`scalelab submit {lab} path/to/notebook.ipynb`."
    )


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


def submit(lab: str, path: str | None, environ: Mapping[str, str] = os.environ) -> dict:
    """Hand in ``lab`` (the notebook at ``path``, see :func:`notebook_for`); the receipt.

    Raises
    ------
    HandInFailed
        Not in a course server, no notebook, or the hub refused (its message says why).
    """
    api, token, user = _hub(environ)
    notebook = notebook_for(lab, path, Path.cwd(), Path(environ.get("HOME", "~")).expanduser())
    name = lab[: -len(".ipynb")] if lab.endswith(".ipynb") else lab
    url = f"{api}/scalelab/users/{quote(user, safe='')}/submissions/{quote(name, safe='')}"
    return _call("POST", url, token, notebook.read_bytes())


def submissions(lab: str | None, environ: Mapping[str, str] = os.environ) -> list[dict]:
    """The receipts of one's versions (of ``lab``, or of every lab), oldest first."""
    api, token, user = _hub(environ)
    url = f"{api}/scalelab/users/{quote(user, safe='')}/submissions"
    if lab:
        url += "/" + quote(lab[: -len(".ipynb")] if lab.endswith(".ipynb") else lab, safe="")
    return _call("GET", url, token)["submissions"]
