"""Executor GPUs of students' Spark applications on a cluster, within the course's GPU limits.

``POST``, ``DELETE`` and ``GET /hub/api/scalelab/users/<user>/spark-gpus`` (with the server's
own token) grant, release and list a user's grants for applications: 200, or 400/409 over
``max_gpus_per_application`` / ``max_gpus_per_user``; nothing is queued.
Why: docs/design-notes.md, scalelab.hub_ext.hub.spark_gpus.
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from scalelab.spawner.gpu_pool import GPUPool
from scalelab.spawner.policy import PolicyError

#: Executor GPUs one request may name, at most (a typo guard; the limits are the policy's).
MAX_GPUS = 1024
#: Characters of an application's name, at most.
MAX_NAME = 200


def parse_grant(body: Any) -> tuple[str, str, int]:
    """A kernel's request (pure): (server name, application, GPUs).

    Raises
    ------
    ValueError
        Not ``{"server": str, "application": non-empty str, "gpus": whole number >= 1}``: the
        message names the field.
    """
    if not isinstance(body, dict) or set(body) - {"server", "application", "gpus"}:
        raise ValueError('a request is {"server": "<name>", "application": "<app>", "gpus": n}')
    server = body.get("server", "")
    application = body.get("application")
    gpus = body.get("gpus")
    if not isinstance(server, str):
        raise ValueError("'server' must be the server's name ('' for the default server)")
    if not isinstance(application, str) or not 0 < len(application) <= MAX_NAME:
        raise ValueError(f"'application' must be a name of 1 to {MAX_NAME} characters")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS:
        raise ValueError(f"'gpus' must be a whole number from 1 to {MAX_GPUS}")
    return server, application, gpus


class SparkGPUsHandler(APIHandler):
    """``/hub/api/scalelab/users/<user>/spark-gpus`` (see the module docstring)."""

    def _pool(self) -> GPUPool:
        pool = GPUPool.current()
        if pool is None:
            raise web.HTTPError(
                409, "This hub has no ScaleLab GPU pool (its spawner is not ScaleLab's)"
            )
        return pool

    def _user(self, user_name: str) -> Any:
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No user {user_name}")
        return user

    def _running_spawner(self, user: Any, server: str) -> Any:
        if server not in user.orm_spawners or not user.spawners[server].ready:
            raise web.HTTPError(409, f"{user.name}/{server} is not running")
        return user.spawners[server]

    def _held(self, pool: GPUPool, user_name: str) -> int:
        allocator = pool.allocator
        return allocator.ledger.held_by_user(user_name) + allocator.spark.held_by_user(user_name)

    def _save_state(self, spawner: Any) -> None:
        """Keep the server's grants in its saved state (JupyterHub's database)."""
        spawner.orm_spawner.state = spawner.get_state()
        self.db.commit()

    @needs_scope("users:activity")
    async def get(self, user_name: str) -> None:
        pool = self._pool()
        user = self._user(user_name)
        grants = [
            g.to_json()
            for key in sorted(f"{user_name}/{name}" for name in user.orm_spawners)
            for g in pool.allocator.spark.of_server(key)
        ]
        self.write(json.dumps({"grants": grants, "held": self._held(pool, user_name)}))

    @needs_scope("users:activity")
    async def post(self, user_name: str) -> None:
        try:
            server, application, gpus = parse_grant(json.loads(self.request.body or b"null"))
        except ValueError as exc:
            raise web.HTTPError(400, f"Invalid Spark GPU request: {exc}") from None
        pool = self._pool()
        user = self._user(user_name)
        spawner = self._running_spawner(user, server)
        groups = [g.name for g in user.groups]
        exempt = bool(pool.policy.admins_exempt and user.admin)
        try:
            grant = await pool.allocator.grant_spark(
                f"{user_name}/{server}", user_name, application, gpus, groups, exempt
            )
        except PolicyError as exc:
            raise web.HTTPError(exc.status, str(exc)) from None
        self._save_state(spawner)
        self.log.info(
            "%s/%s: Spark application %s granted %d executor GPU(s)",
            user_name,
            server,
            application,
            gpus,
        )
        self.write(json.dumps({"grant": grant.to_json(), "held": self._held(pool, user_name)}))

    @needs_scope("users:activity")
    async def delete(self, user_name: str) -> None:
        pool = self._pool()
        user = self._user(user_name)
        server = self.get_argument("server", "")
        application = self.get_argument("application", None) or None
        released = pool.allocator.spark.release(f"{user_name}/{server}", application)
        if released and server in user.orm_spawners:
            self._save_state(user.spawners[server])
        self.set_status(204)


def handlers() -> list[tuple[str, type]]:
    """Routes for ``c.JupyterHub.extra_handlers`` (mounted under ``/hub/``)."""
    return [(r"/api/scalelab/users/([^/]+)/spark-gpus", SparkGPUsHandler)]
