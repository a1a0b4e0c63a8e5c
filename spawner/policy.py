"""GPU limits: per server, per user, per JupyterHub group, and limits that start on a date.

Pure logic: :class:`GPUPolicy` (typed settings) becomes a list of :class:`LimitRule`;
:func:`effective_limits` keeps the most restrictive of those that apply to a user on a day;
:func:`check_request` and :func:`check_application` (a Spark application's executor GPUs) say
whether a request fits. Why: docs/design-notes.md, scalelab.spawner.policy.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from traitlets import Bool, Dict, Float, Integer, List, TraitError, validate

from scalelab.common.strictconfig import StrictConfigurable

#: Keys a limit may set.
LIMIT_KEYS = frozenset({"max_gpus_per_server", "max_gpus_per_user", "max_gpus_per_application"})
#: Keys a dated limit may set, besides the limits.
DATED_KEYS = frozenset({"from", "groups"})


class PolicyError(ValueError):
    """A GPU request that the limits refuse; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LimitRule:
    """One limit from the configuration.

    Attributes
    ----------
    source
        Where it comes from, for messages: ``"GPUPolicy.max_gpus_per_user"``, ``"group ml-course"``,
        ``"from 2027-05-20"``.
    per_server, per_user
        Maximum GPUs for one server / for all of a user's servers together; None: no limit.
    groups
        The rule applies to members of these JupyterHub groups only; None: to everyone.
    start
        The rule applies from this day on (inclusive); None: always.
    """

    source: str
    per_server: int | None = None
    per_user: int | None = None
    groups: frozenset[str] | None = None
    start: dt.date | None = None
    #: Maximum executor GPUs of one Spark application on a cluster; None: no limit.
    per_application: int | None = None

    def applies(self, groups: Iterable[str], today: dt.date) -> bool:
        """Whether the rule applies to a member of ``groups`` on ``today``."""
        in_group = self.groups is None or bool(self.groups & set(groups))
        return in_group and (self.start is None or today >= self.start)


@dataclass(frozen=True)
class Limits:
    """The limits in force for one user: the smallest of each kind among the applicable rules."""

    per_server: int | None
    per_user: int | None
    per_server_source: str = ""
    per_user_source: str = ""
    per_application: int | None = None
    per_application_source: str = ""


def effective_limits(
    rules: Sequence[LimitRule], groups: Iterable[str], today: dt.date, exempt: bool = False
) -> Limits:
    """The limits for a member of ``groups`` on ``today``; no limits when ``exempt``."""
    if exempt:
        return Limits(None, None)
    groups = set(groups)
    applicable = [r for r in rules if r.applies(groups, today)]

    def smallest(kind: str) -> tuple[int | None, str]:
        found = [(getattr(r, kind), r.source) for r in applicable if getattr(r, kind) is not None]
        return min(found, key=lambda f: f[0]) if found else (None, "")

    per_server, server_source = smallest("per_server")
    per_user, user_source = smallest("per_user")
    per_app, app_source = smallest("per_application")
    return Limits(per_server, per_user, server_source, user_source, per_app, app_source)


def check_request(gpus: int, limits: Limits, held_by_user: int) -> None:
    """Check a request for ``gpus`` GPUs against ``limits``.

    Parameters
    ----------
    gpus
        GPUs the new server asks for.
    limits
        From :func:`effective_limits`.
    held_by_user
        GPUs the user's other servers hold now.

    Raises
    ------
    PolicyError
        400 when the request can never fit a server; 409 when it would take the user over their
        limit with what their other servers hold (stopping one makes room).
    """
    if limits.per_server is not None and gpus > limits.per_server:
        raise PolicyError(
            f"{gpus} GPUs asked for, but a server may have at most {limits.per_server} "
            f"({limits.per_server_source})."
        )
    if limits.per_user is not None and held_by_user + gpus > limits.per_user:
        raise PolicyError(
            f"{gpus} more GPU(s) would give you {held_by_user + gpus}, but you may hold at most "
            f"{limits.per_user} ({limits.per_user_source}); your other servers hold "
            f"{held_by_user}. Stop one of them, or ask for fewer GPUs.",
            status=409,
        )


def check_application(gpus: int, limits: Limits, held_by_user: int) -> None:
    """Check a Spark application's request for ``gpus`` executor GPUs on a cluster (pure).

    Parameters
    ----------
    gpus
        GPUs of all its executors together (``spark.executor.resource.gpu.amount`` times the
        executors), at least 1.
    limits
        From :func:`effective_limits`.
    held_by_user
        GPUs the user's servers and other Spark applications hold now.

    Raises
    ------
    PolicyError
        400 when over the per-application limit (it can never fit); 409 when it would take
        the user over their limit with what they hold now (stopping something makes room).
    """
    if limits.per_application is not None and gpus > limits.per_application:
        raise PolicyError(
            f"Your Spark application asks for {gpus} executor GPU(s), but an application may "
            f"have at most {limits.per_application} ({limits.per_application_source}). Ask "
            "for fewer: spark.executor.resource.gpu.amount times spark.executor.instances (or "
            "spark.dynamicAllocation.maxExecutors) at most "
            f"{limits.per_application}."
        )
    if limits.per_user is not None and held_by_user + gpus > limits.per_user:
        raise PolicyError(
            f"Your Spark application's {gpus} executor GPU(s) would give you "
            f"{held_by_user + gpus}, but you may hold at most {limits.per_user} "
            f"({limits.per_user_source}); your servers and other Spark applications hold "
            f"{held_by_user}. Stop one of them (spark.stop() in its notebook), or ask for "
            "fewer executor GPUs.",
            status=409,
        )


def _limit_values(where: str, entry: dict, allowed: frozenset[str]) -> dict:
    unknown = set(entry) - allowed
    if unknown:
        raise TraitError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    for key in LIMIT_KEYS & set(entry):
        value = entry[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TraitError(f"{where}: {key} must be a whole number >= 0, not {value!r}")
    return entry


class GPUPolicy(StrictConfigurable):
    """Who may hold how many GPUs, and for how long (typed configuration, validated at start).

    Raises
    ------
    traitlets.TraitError
        When made with a misspelt setting (an ``UnknownSettingError``, see
        :mod:`scalelab.common.strictconfig`), a bad value, or an unknown key in a limit.
    """

    max_gpus_per_server = Integer(
        4, min=0, config=True, help="Most GPUs one server may hold. 0: servers get no GPU."
    )
    max_gpus_per_user = Integer(
        4,
        min=0,
        config=True,
        help="Most GPUs all of one user's servers may hold together. 0: users get no GPU.",
    )
    max_gpus_per_application = Integer(
        None,
        allow_none=True,
        min=0,
        config=True,
        help="""Most executor GPUs one Spark application on a cluster (standalone or YARN) may
        ask for (spark.executor.resource.gpu.amount times its executors); they count toward
        max_gpus_per_user with the user's servers' GPUs. None: no limit of its own. Groups and
        dated limits may set "max_gpus_per_application" too.""",
    )
    group_limits = Dict(
        config=True,
        help="""Limits for members of JupyterHub groups: group name -> {"max_gpus_per_server": n,
        "max_gpus_per_user": n}. A member gets the smallest limit of every rule that applies.
        Example: {"ml-course": {"max_gpus_per_user": 2}}.""",
    )
    dated_limits = List(
        Dict(),
        config=True,
        help="""Limits that start on a day (the hub's local date), for everyone or for some groups:
        [{"from": "2027-05-20", "max_gpus_per_server": 1, "max_gpus_per_user": 2,
        "groups": ["ml-course"]}]. "groups" is optional.""",
    )
    max_gpu_session_hours = Float(
        0.0,
        min=0.0,
        config=True,
        help="""Hours a server may hold GPUs before it is stopped (files are kept); the student is
        warned first. 0: no limit.""",
    )
    gpu_session_warning_minutes = Float(
        15.0,
        min=0.0,
        config=True,
        help="""Minutes before the end of a GPU session from which every cell the student runs
        prints a warning with the time the server stops.""",
    )
    admins_exempt = Bool(
        False,
        config=True,
        help="Whether JupyterHub admins are exempt from every GPU limit (not from the inventory).",
    )

    @validate("group_limits")
    def _check_group_limits(self, proposal):
        for group, entry in proposal["value"].items():
            if not isinstance(entry, dict):
                raise TraitError(f"GPUPolicy.group_limits[{group!r}] must be a dict of limits")
            _limit_values(f"GPUPolicy.group_limits[{group!r}]", entry, LIMIT_KEYS)
        return proposal["value"]

    @validate("dated_limits")
    def _check_dated_limits(self, proposal):
        for index, entry in enumerate(proposal["value"]):
            where = f"GPUPolicy.dated_limits[{index}]"
            _limit_values(where, entry, LIMIT_KEYS | DATED_KEYS)
            try:
                dt.date.fromisoformat(str(entry.get("from")))
            except ValueError:
                raise TraitError(f"{where}: 'from' must be a date like 2027-05-20") from None
            groups = entry.get("groups", [])
            if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
                raise TraitError(f"{where}: 'groups' must be a list of group names")
        return proposal["value"]

    def rules(self) -> list[LimitRule]:
        """The configuration as :class:`LimitRule` objects."""
        rules = [
            LimitRule("GPUPolicy.max_gpus_per_server", per_server=self.max_gpus_per_server),
            LimitRule("GPUPolicy.max_gpus_per_user", per_user=self.max_gpus_per_user),
        ]
        if self.max_gpus_per_application is not None:
            rules.append(
                LimitRule(
                    "GPUPolicy.max_gpus_per_application",
                    per_application=self.max_gpus_per_application,
                )
            )
        for group, entry in self.group_limits.items():
            rules.append(
                LimitRule(
                    f"limit of group {group}",
                    per_server=entry.get("max_gpus_per_server"),
                    per_user=entry.get("max_gpus_per_user"),
                    groups=frozenset({group}),
                    per_application=entry.get("max_gpus_per_application"),
                )
            )
        for entry in self.dated_limits:
            groups = entry.get("groups")
            rules.append(
                LimitRule(
                    f"limit from {entry['from']}" + (f" for {', '.join(groups)}" if groups else ""),
                    per_server=entry.get("max_gpus_per_server"),
                    per_user=entry.get("max_gpus_per_user"),
                    groups=frozenset(groups) if groups else None,
                    start=dt.date.fromisoformat(entry["from"]),
                    per_application=entry.get("max_gpus_per_application"),
                )
            )
        return rules
