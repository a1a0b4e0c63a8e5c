"""ScaleLab's work at hub start: the GPU pool, and the queue started again after a restart.

:func:`start_with_hub`, called in ``jupyterhub_config.py``, schedules :func:`at_hub_start`: it
builds the GPU pool at once and, once the hub runs, starts each restored request again in its
student's name; a request that cannot be started again is dropped with a log line.
Why: docs/design-notes.md, scalelab.spawner.hubstart.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from scalelab.spawner.gpu_pool import GPUPool
from scalelab.spawner.gpu_spawner import GPUSpawnerMixin
from scalelab.spawner.queue_store import QueuedSpawn

#: Seconds the token of a restarted request is valid.
TOKEN_LIFETIME_S = 300
_tasks: set[asyncio.Task] = set()


def start_with_hub() -> bool:
    """Schedule :func:`at_hub_start`; call it in ``jupyterhub_config.py``.

    Returns
    -------
    bool
        True when scheduled; False when the file is read outside a starting JupyterHub (no
        running event loop or no JupyterHub application), where it does nothing.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return False
    from jupyterhub.app import JupyterHub

    if not JupyterHub.initialized():
        return False
    task = loop.create_task(at_hub_start(JupyterHub.instance()))
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)
    return True


async def at_hub_start(app: Any) -> None:
    """Build the GPU pool now; once the hub runs, start the restored requests again.

    ``app`` is the running ``jupyterhub.app.JupyterHub``. Nothing happens for a spawner class
    without :class:`~scalelab.spawner.gpu_spawner.GPUSpawnerMixin`.
    """
    log: logging.Logger = app.log
    spawner_class = app.spawner_class
    if not (isinstance(spawner_class, type) and issubclass(spawner_class, GPUSpawnerMixin)):
        return
    allocator = (await GPUPool.ensure_for(spawner_class, app.config)).allocator
    started = getattr(app, "_start_future", None)  # JupyterHub resolves it once it runs
    if started is None:
        log.warning("ScaleLab cannot tell when the hub runs: queued requests wait for students")
        return
    await started
    waiting = allocator.placeholders()
    if waiting:
        log.info("ScaleLab starts %d queued request(s) again, in their places", len(waiting))
        await asyncio.gather(*(resume(app, allocator, spawn) for spawn in waiting))


async def resume(app: Any, allocator: Any, spawn: QueuedSpawn) -> bool:
    """Start one restored request again through the hub's REST API, in its user's name.

    Returns
    -------
    bool
        True when the hub took the spawn (HTTP 201 or 202); otherwise the request is dropped
        from the queue and the reason logged.
    """
    from jupyterhub import orm

    log: logging.Logger = app.log
    user, name = spawn.entry.user, spawn.server_name
    orm_user = orm.User.find(app.db, user)
    if orm_user is None:
        log.warning("ScaleLab dropped the queued request of %s: no such user", spawn.entry.server)
        await allocator.cancel(spawn.entry.server)
        return False
    token = orm_user.new_api_token(
        scopes=[f"servers!user={user}"],
        expires_in=TOKEN_LIFETIME_S,
        note="ScaleLab: start a queued GPU request again after a hub restart",
    )
    path = f"users/{quote(user, safe='')}/server"
    if name:
        path = f"users/{quote(user, safe='')}/servers/{quote(name, safe='')}"
    request = HTTPRequest(
        app.hub.url + "api/" + path,
        method="POST",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        body=json.dumps({"user_options": dict(spawn.user_options)}),
        request_timeout=60,
    )
    try:
        response = await AsyncHTTPClient().fetch(request, raise_error=False)
    finally:
        orm_token = orm.APIToken.find(app.db, token)
        if orm_token is not None:
            app.db.delete(orm_token)
            app.db.commit()
    if response.code in (201, 202):
        log.info("ScaleLab started the queued request of %s again", spawn.entry.server)
        return True
    why = response.body.decode(errors="replace")[:300] if response.body else response.reason
    log.warning(
        "ScaleLab dropped the queued request of %s: the hub answered %s (%s)",
        spawn.entry.server,
        response.code,
        why,
    )
    await allocator.cancel(spawn.entry.server)
    return False
