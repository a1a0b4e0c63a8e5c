"""The GPU readings that single-user servers report from the node that holds their GPUs.

``POST /hub/api/scalelab/users/<user>/gpu-readings`` (scope ``users:activity`` on that user)
answers 204 and keeps the readings of the GPUs the server holds in the hub's GPU source
(:class:`~scalelab.spawner.gpu_source.ReportedGPUs`); a report naming another's GPU gets a 403.
Why: docs/design-notes.md, scalelab.hub_ext.hub.gpu_reports.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Sequence
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from scalelab.common.gpu_source import Reading
from scalelab.spawner.gpu_pool import GPUPool

#: GPUs in one report, at most.
MAX_GPUS = 64


def parse_report(body: Any) -> tuple[str, list[tuple[str, Reading]]]:
    """A server's report (pure): its server name, and (uuid, reading) per GPU in its order.

    Raises
    ------
    ValueError
        Not the shape above: the message names the field.
    """
    if not isinstance(body, dict) or set(body) - {"server", "gpus"}:
        raise ValueError('a report is {"server": "<name>", "gpus": [...]}')
    server = body.get("server", "")
    gpus = body.get("gpus")
    if not isinstance(server, str) or not isinstance(gpus, list) or len(gpus) > MAX_GPUS:
        raise ValueError(f"'server' must be a name and 'gpus' a list of at most {MAX_GPUS}")
    readings = []
    for entry in gpus:
        uuid = entry.get("uuid") if isinstance(entry, dict) else None
        util = entry.get("utilization_pct") if isinstance(entry, dict) else None
        used = entry.get("memory_used_mib") if isinstance(entry, dict) else None
        if not isinstance(uuid, str) or not uuid:
            raise ValueError("each GPU needs a 'uuid'")
        if isinstance(util, bool) or not isinstance(util, int | float) or not 0 <= util <= 100:
            raise ValueError(f"{uuid}: 'utilization_pct' must be a number from 0 to 100")
        if used is not None and (isinstance(used, bool) or not isinstance(used, int) or used < 0):
            raise ValueError(f"{uuid}: 'memory_used_mib' must be a whole number >= 0 or null")
        if isinstance(util, float) and math.isnan(util):
            raise ValueError(f"{uuid}: 'utilization_pct' is not a number")
        readings.append((uuid, (float(util), used)))
    return server, readings


def foreign_gpus(
    held: Sequence[str], known: Collection[str], reported: Sequence[tuple[str, Reading]]
) -> list[str]:
    """The reported GPUs that are GPUs of the hub's inventory (``known``) but not ``held`` by
    the reporting server (pure), in the report's order: a report naming any is refused."""
    return [uuid for uuid, _ in reported if uuid in known and uuid not in held]


def held_readings(
    held: Sequence[str], reported: Sequence[tuple[str, Reading]]
) -> dict[str, Reading]:
    """The reported readings as readings of the ``held`` GPUs (pure): a reported UUID that is
    held is that GPU's; the others go, in order, to the held GPUs not named."""
    by_uuid: dict[str, Reading] = {}
    others = []
    for uuid, reading in reported:
        if uuid in held:
            by_uuid[uuid] = reading
        else:
            others.append(reading)
    rest = [uuid for uuid in held if uuid not in by_uuid]
    by_uuid.update(zip(rest, others, strict=False))
    return by_uuid


class GPUReadingsHandler(APIHandler):
    """``POST /hub/api/scalelab/users/<user>/gpu-readings`` (see the module docstring)."""

    @needs_scope("users:activity")
    async def post(self, user_name: str) -> None:
        try:
            server, reported = parse_report(json.loads(self.request.body or b"null"))
        except ValueError as exc:
            raise web.HTTPError(400, f"Invalid GPU report: {exc}") from None
        pool = GPUPool.current()
        record = getattr(pool.source, "record", None) if pool is not None else None
        if record is None:
            raise web.HTTPError(
                409, "This hub does not take GPU reports (its gpu_source_class is not ReportedGPUs)"
            )
        holding = pool.allocator.ledger.holding(f"{user_name}/{server}")
        if holding is None or not holding.gpus:
            raise web.HTTPError(409, f"{user_name}/{server} holds no GPU")
        known = {gpu.uuid for gpu in pool.inventory.gpus}
        foreign = foreign_gpus(holding.gpus, known, reported)
        if foreign:
            raise web.HTTPError(
                403,
                f"{user_name}/{server} does not hold GPU(s) {', '.join(foreign)}: a server "
                f"reports only its own GPUs ({', '.join(holding.gpus)})",
            )
        record(held_readings(holding.gpus, reported))
        self.set_status(204)


def handlers() -> list[tuple[str, type]]:
    """Routes for ``c.JupyterHub.extra_handlers`` (mounted under ``/hub/``)."""
    return [(r"/api/scalelab/users/([^/]+)/gpu-readings", GPUReadingsHandler)]
