"""GPUs granted to students' Spark applications on a cluster (pure logic, no I/O).

A grant is a number of the cluster's GPUs for one application of one server, counted against
the course's limits with what the user's servers hold; it goes when the application ends, a new
grant replaces it or the server stops, and lives in the server's saved state across restarts.
Why: docs/design-notes.md, scalelab.spawner.spark_grants.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Applications one server may hold grants for at once.
MAX_APPLICATIONS_PER_SERVER = 16


class GrantError(ValueError):
    """A grant this registry refuses (too many applications on one server)."""


@dataclass(frozen=True)
class SparkGrant:
    """Executor GPUs granted to one Spark application.

    Attributes
    ----------
    server
        The server the application's driver runs in, ``"<user>/<server name>"``.
    user
        The user's name.
    application
        The application's name or id, as the kernel gave it (``spark.app.name``).
    gpus
        GPUs of all its executors together (>= 1).
    since
        When granted, seconds since the epoch.
    """

    server: str
    user: str
    application: str
    gpus: int
    since: float

    def to_json(self) -> dict:
        """What the hub answers and a server's state keeps: ``application``, ``gpus``,
        ``since``, and ``server``."""
        return {
            "server": self.server,
            "application": self.application,
            "gpus": self.gpus,
            "since": self.since,
        }


class SparkGrants:
    """The hub's grants, by (server, application)."""

    def __init__(self) -> None:
        self._grants: dict[tuple[str, str], SparkGrant] = {}

    def get(self, server: str, application: str) -> SparkGrant | None:
        """The grant of ``application`` in ``server``, or None."""
        return self._grants.get((server, application))

    def of_server(self, server: str) -> list[SparkGrant]:
        """``server``'s grants, oldest first."""
        found = [g for (s, _), g in self._grants.items() if s == server]
        return sorted(found, key=lambda g: (g.since, g.application))

    def all(self) -> list[SparkGrant]:
        """Every grant, oldest first."""
        return sorted(self._grants.values(), key=lambda g: (g.since, g.server, g.application))

    def held_by_user(self, user: str) -> int:
        """GPUs granted to all of ``user``'s applications together."""
        return sum(g.gpus for g in self._grants.values() if g.user == user)

    def put(self, grant: SparkGrant) -> SparkGrant | None:
        """Keep ``grant``, replacing that application's previous one (returned, or None).

        Raises
        ------
        GrantError
            Its server already has :data:`MAX_APPLICATIONS_PER_SERVER` other applications.
        """
        key = (grant.server, grant.application)
        if key not in self._grants and len(self.of_server(grant.server)) >= (
            MAX_APPLICATIONS_PER_SERVER
        ):
            raise GrantError(
                f"{grant.server} already has {MAX_APPLICATIONS_PER_SERVER} Spark applications "
                "holding GPUs: stop one (spark.stop()) first"
            )
        previous = self._grants.get(key)
        self._grants[key] = grant
        return previous

    def release(self, server: str, application: str | None = None) -> list[SparkGrant]:
        """Drop ``application``'s grant in ``server`` (every grant of ``server`` when None);
        returns what was dropped (empty when nothing was held)."""
        keys = [
            k
            for k in self._grants
            if k[0] == server and (application is None or k[1] == application)
        ]
        return [self._grants.pop(k) for k in keys]
