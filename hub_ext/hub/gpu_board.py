"""The GPU board for ops: an admin-only hub page and REST endpoint.

``GET /hub/api/scalelab/gpus`` (scope ``admin:servers``, JSON: :func:`board_model`) and
``GET /hub/scalelab/gpus`` (scope ``admin-ui``, the page) run in the hub process beside the GPU
pool; ``scalelab.configure(c)`` registers :func:`handlers`. The GPU monitor reads the board too.
Why: docs/design-notes.md, scalelab.hub_ext.hub.gpu_board.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.handlers.base import BaseHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from scalelab.common.gpu_inventory import GPUInventory
from scalelab.common.gpu_source import Reading
from scalelab.spawner.allocator import GPUAllocator
from scalelab.spawner.gpu_pool import GPUPool


def board_model(
    allocator: GPUAllocator,
    inventory: GPUInventory,
    readings: Mapping[str, Reading],
    now: float,
    readings_problem: str | None = None,
) -> dict[str, Any]:
    """The board's content (pure).

    Returns
    -------
    dict
        ``source`` of the inventory; ``gpus``: one entry per GPU with ``uuid``, ``index``,
        ``name``, ``memory_mib``, ``holder`` (``{"server", "user", "since"}`` with ``since`` in
        ISO 8601 UTC, or None), ``quarantined`` (the reason, or None), ``utilization_pct`` and
        ``memory_used_mib`` (None when the GPU source cannot read them: a declared GPU, a MIG
        instance, no NVML); ``queue``: waiting requests in order with
        ``position``, ``server``, ``user``, ``gpus``, ``waiting_s`` and ``estimated_wait_s``
        (None when unknown); ``spark``: the executor GPUs granted to students' Spark
        applications on a cluster (counted against their limits, placed by the cluster, so in
        no GPU's row), oldest first, with ``server``, ``user``, ``application``, ``gpus`` and
        ``since`` (ISO 8601 UTC); ``readings_problem``: why the GPU source's readings are
        unknown (it raised), or None.
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
                    "since": _iso(holding.since),
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
    spark = [
        {**grant.to_json(), "user": grant.user, "since": _iso(grant.since)}
        for grant in allocator.spark.all()
    ]
    return {
        "source": inventory.source,
        "gpus": gpus,
        "queue": queue,
        "spark": spark,
        "readings_problem": readings_problem,
    }


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


async def _current_board(handler: BaseHandler) -> dict[str, Any]:
    pool = GPUPool.current()
    if pool is None:  # no spawn yet: build it from the hub's configuration
        settings = handler.settings
        pool = await GPUPool.ensure_for(settings["spawner_class"], settings["config"])
    readings = await pool.readings()  # from the pool's GPU source, in a worker thread
    return board_model(
        pool.allocator, pool.inventory, readings, pool.allocator.clock(), pool.readings_problem
    )


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
