"""The server API's ``PATCH`` (``/hub/api/users/<user>/server[s/<name>]``): bad fields get a 400.

:class:`ServerPatchHandler` is JupyterHub's handler with a PATCH that first refuses, with a 400
and one warning line, a field other than ``name``, ``display_name`` and ``user_options``, or
``user_options`` the server's spawner would refuse; :func:`mount` puts it before the hub's own.
Why: docs/design-notes.md, scalelab.hub_ext.hub.server_patch.
"""

from __future__ import annotations

import asyncio
import logging
import reprlib
from typing import Any

from jupyterhub.apihandlers.users import UserServerAPIHandler
from jupyterhub.apihandlers.users import default_handlers as user_handlers
from jupyterhub.scopes import needs_scope

from scalelab.spawner.gpu_spawner import GPUSpawnerMixin
from scalelab.spawner.profiles import OptionsError
from scalelab.spawner.refusals import refuse

#: The fields JupyterHub's server PATCH changes.
PATCH_FIELDS = ("display_name", "name", "user_options")
#: Seconds between looks for the hub's tornado application, while the hub initializes.
_POLL_S = 0.02

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 40
_repr.maxlist = 4
_tasks: set[asyncio.Task] = set()


def unknown_fields_message(body: Any) -> str | None:
    """What is wrong with the fields of a server PATCH's JSON ``body``, or None.

    Only the fields are judged; their values (and a body that is not an object) are left to
    JupyterHub, which answers a 400 for those itself.
    """
    if not isinstance(body, dict):
        return None
    unknown = sorted(map(str, set(body) - set(PATCH_FIELDS)))
    if not unknown:
        return None
    hint = ""
    if "user_options" not in body:
        hint = " (server options go inside 'user_options')"
    return (
        f"unknown field(s) {_repr.repr(unknown)} in a server PATCH; "
        f"allowed: {', '.join(PATCH_FIELDS)}{hint}"
    )


class ServerPatchHandler(UserServerAPIHandler):
    """JupyterHub's server API, whose PATCH refuses unknown fields and bad ScaleLab options with
    a 400 before JupyterHub's own PATCH runs (see the module docstring)."""

    @needs_scope("start:servers")
    async def patch(self, user_name, server_name=""):
        user = self.find_user(user_name)
        if user is not None:  # else JupyterHub's 404
            body = self.get_json_body()
            problem = unknown_fields_message(body)
            if problem:
                raise refuse(self.log, user.name, server_name, 400, problem, action="PATCH")
            options = body.get("user_options") if isinstance(body, dict) else None
            if isinstance(options, dict) and server_name in user.orm_spawners:
                await self._check_options(user, server_name, options)
        return await super().patch(user_name, server_name)

    async def _check_options(self, user: Any, server_name: str, options: dict) -> None:
        """Refuse ``options`` that the server's ScaleLab spawner would refuse at its start."""
        spawner = user.get_spawner(server_name)
        if not isinstance(spawner, GPUSpawnerMixin):
            return
        try:
            await spawner.parse_options(options)
        except OptionsError as exc:
            message = f"Invalid server options: {exc}"
            raise refuse(self.log, user.name, server_name, 400, message, action="PATCH") from None


def routes(hub_prefix: str) -> list[tuple]:
    """JupyterHub's routes of the server API (under ``hub_prefix``), to
    :class:`ServerPatchHandler`."""
    from jupyterhub.app import JupyterHub

    mine = [
        (route[0], ServerPatchHandler)
        for route in user_handlers
        if route[1] is UserServerAPIHandler
    ]
    return JupyterHub.add_url_prefix(hub_prefix, mine)


async def _mount_when_ready(app: Any) -> None:
    while getattr(app, "tornado_application", None) is None:
        await asyncio.sleep(_POLL_S)
    app.tornado_application.add_handlers(".*$", routes(app.hub_prefix))
    log: logging.Logger = app.log
    log.debug("ScaleLab: the server API's PATCH refuses unknown fields with a 400")


def mount(app: Any) -> None:
    """Put :class:`ServerPatchHandler` on the server API's routes of ``app`` (the starting
    ``jupyterhub.app.JupyterHub``), ahead of JupyterHub's, once its tornado application exists.

    Call it in the hub's event loop, while the hub initializes (from its configuration file).
    """
    task = asyncio.get_running_loop().create_task(_mount_when_ready(app))
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
