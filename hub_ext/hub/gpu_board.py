"""The GPU board for ops: an admin-only hub page and REST endpoint.

- ``GET /hub/api/scalelab/gpus`` (scope ``admin:servers``): JSON, see :func:`board_model`;
- ``GET /hub/scalelab/gpus`` (scope ``admin-ui``): the same as a page (``gpu_board.html``).

They run inside the hub process, beside the allocator, so they are registered as
``c.JupyterHub.extra_handlers = scalelab.hub_ext.hub.gpu_board.handlers()`` (JupyterHub logs that
extra_handlers are deprecated in favour of services; a service could not see the queue).
``scalelab up`` registers them; an existing hub also needs ScaleLab's templates folder in
``c.JupyterHub.template_paths`` for the page.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from scalelab.spawner.allocator import GPUAllocator
from scalelab.spawner.gpu_spawner import GPUSpawnerMixin
from scalelab.spawner.inventory import GPUInventory, nvml_utilization


def board_model(
    allocator: GPUAllocator,
    inventory: GPUInventory,
    readings: dict[str, tuple[int, int]],
    now: float,
) -> dict[str, Any]:
    """The board's content (pure).

    Returns
    -------
    dict
        ``source`` of the inventory; ``gpus``: one entry per GPU with ``uuid``, ``index``,
        ``name``, ``memory_mib``, ``holder`` (``{"server", "user", "since"}`` with ``since`` in
        ISO 8601 UTC, or None), ``quarantined`` (the reason, or None), ``utilization_pct`` and
        ``memory_used_mib`` (None without NVML); ``queue``: waiting requests in order with
        ``position``, ``server``, ``user``, ``gpus``, ``waiting_s`` and ``estimated_wait_s``
        (None when unknown).
    """
    holders = {gpu: h for h in allocator.ledger.holdings() for gpu in h.gpus}
    quarantined = allocator.ledger.quarantined()
    gpus = []
    for gpu in inventory.gpus:
        holding = holders.get(gpu.uuid)
        util, used = readings.get(gpu.uuid, (None, None))
        gpus.append(
            {
                "uuid": gpu.uuid,
                "index": gpu.index,
                "name": gpu.name,
                "memory_mib": gpu.memory_mib,
                "holder": None
                if holding is None
                else {
                    "server": holding.server,
                    "user": holding.user,
                    "since": dt.datetime.fromtimestamp(holding.since, dt.UTC).isoformat(),
                },
                "quarantined": quarantined.get(gpu.uuid),
                "utilization_pct": util,
                "memory_used_mib": used,
            }
        )
    statuses = allocator.statuses()
    entries = {e.server: e for e in allocator.queue.ordered({})}
    queue = [
        {
            "position": status.position,
            "server": server,
            "user": entries[server].user,
            "gpus": entries[server].gpus,
            "waiting_s": round(now - entries[server].enqueued),
            "estimated_wait_s": None if math.isinf(status.wait_s) else round(status.wait_s),
        }
        for server, status in statuses.items()
    ]
    return {"source": inventory.source, "gpus": gpus, "queue": queue}


async def _current_board(handler: BaseHandler) -> dict[str, Any]:
    allocator = GPUSpawnerMixin._allocator
    if allocator is None:  # no spawn yet: build it from the hub's configuration
        spawner = handler.settings["spawner_class"](config=handler.settings["config"])
        allocator = await spawner.gpu_allocator()
    inventory = GPUSpawnerMixin._inventory
    assert inventory is not None
    readings = {}
    if inventory.source == "nvml":
        readings = await asyncio.to_thread(nvml_utilization, [g.uuid for g in inventory.gpus])
    return board_model(allocator, inventory, readings, allocator.clock())


class GPUBoardAPIHandler(APIHandler):
    """``GET /hub/api/scalelab/gpus``: the GPU board as JSON (admins)."""

    @needs_scope("admin:servers")
    async def get(self):
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(await _current_board(self)))


class GPUBoardHandler(BaseHandler):
    """``GET /hub/scalelab/gpus``: the GPU board page (admins)."""

    @web.authenticated
    @needs_scope("admin-ui")
    async def get(self):
        board = await _current_board(self)
        self.finish(await self.render_template("gpu_board.html", board=board))


def handlers() -> list[tuple[str, type]]:
    """Routes for ``c.JupyterHub.extra_handlers`` (mounted under ``/hub/``)."""
    return [(r"/api/scalelab/gpus", GPUBoardAPIHandler), (r"/scalelab/gpus", GPUBoardHandler)]
