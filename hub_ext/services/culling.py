"""Culling that understands GPUs: the rules (pure) and their typed configuration.

:func:`decide` is the rule: a server executing or with a busy GPU is active; one whose GPUs stay
idle for ``gpu_idle_timeout`` is warned, then stopped; a GPU that cannot be read never counts as
idle. :class:`ScaleLabCulling` holds the settings; :func:`configure_culling` makes two services.
Why: docs/design-notes.md, scalelab.hub_ext.services.culling.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from traitlets import Bool, Float, Integer, validate
from traitlets.config import Config

from scalelab.common.access_log import SERVICE_NAMES  # the services configure_culling adds
from scalelab.common.strictconfig import StrictConfigurable, UnknownSettingError

NONE, WARN, STOP = "none", "warn", "stop"


@dataclass(frozen=True)
class ServerObservation:
    """What the monitor saw of one running server at one poll.

    Attributes
    ----------
    kernel_busy
        Some kernel of the server is executing (jupyter_server's ``execution_state == "busy"``).
    gpus
        UUIDs of the GPUs the server holds (empty: CPU only).
    utilization
        uuid -> GPU utilisation in % over NVML's last sample period, for the GPUs that could
        be read; a held GPU missing here is *unknown*, never idle.
    """

    kernel_busy: bool
    gpus: tuple[str, ...] = ()
    utilization: Mapping[str, float] | None = None


@dataclass(frozen=True)
class IdleRules:
    """The thresholds of :func:`decide` (see :class:`ScaleLabCulling` for each one's meaning)."""

    busy_threshold_pct: float = 5.0
    gpu_idle_timeout_s: float = 1800.0
    gpu_idle_warning_s: float = 600.0


@dataclass(frozen=True)
class Decision:
    """What to do with a server after one poll.

    Attributes
    ----------
    active
        Move the server's ``last_activity`` to now (the culler must leave it alone).
    action
        ``"none"``, ``"warn"`` (tell the student once per idle spell) or ``"stop"``.
    gpu_idle_since
        Start of the current spell of GPU idleness (seconds since the epoch), or None; the
        monitor keeps it for the next poll.
    reason
        One line for the hub log and the student's warning.
    """

    active: bool
    action: str
    gpu_idle_since: float | None
    reason: str


def _duration(seconds: float) -> str:
    """``"45 s"`` under two minutes, else ``"12 min"``."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def decide(
    obs: ServerObservation,
    rules: IdleRules,
    now: float,
    gpu_idle_since: float | None,
    warned: bool,
) -> Decision:
    """The culling rule for one server (pure).

    Parameters
    ----------
    obs
        This poll's observation.
    rules
        Thresholds.
    now
        Seconds since the epoch.
    gpu_idle_since
        The idle spell carried from the previous poll (None: none yet).
    warned
        Whether the student was already warned in this idle spell.

    Returns
    -------
    Decision
    """
    readings = obs.utilization or {}
    known = [readings[g] for g in obs.gpus if g in readings]
    gpu_busy = any(u > rules.busy_threshold_pct for u in known)
    active = obs.kernel_busy or gpu_busy
    why_active = "a kernel is executing" if obs.kernel_busy else ""
    if gpu_busy:
        why_active = f"GPU utilisation {max(known):.0f} %"
    if not obs.gpus or gpu_busy or len(known) < len(obs.gpus) or rules.gpu_idle_timeout_s <= 0:
        reason = why_active or ("no GPU held" if not obs.gpus else "GPU utilisation unknown")
        return Decision(active, NONE, None, reason)
    since = now if gpu_idle_since is None else gpu_idle_since
    idle_s = now - since
    held = ", ".join(obs.gpus)
    if idle_s >= rules.gpu_idle_timeout_s:
        reason = (
            f"its GPU(s) {held} stayed at or under {rules.busy_threshold_pct:g} % for "
            f"{_duration(idle_s)} (limit {_duration(rules.gpu_idle_timeout_s)})"
        )
        return Decision(active, STOP, since, reason)
    left = rules.gpu_idle_timeout_s - idle_s
    if left <= rules.gpu_idle_warning_s and not warned:
        reason = (
            f"Your GPU(s) {held} have been idle (at or under {rules.busy_threshold_pct:g} %) "
            f"for {_duration(idle_s)}. Your server will be stopped in about "
            f"{_duration(left)} to return the GPU to the queue; your files are "
            "kept. Run GPU work, or save and stop the server yourself."
        )
        return Decision(active, WARN, since, reason)
    return Decision(active, NONE, since, why_active or f"GPU idle for {idle_s:.0f} s")


class ScaleLabCulling(StrictConfigurable):
    """Culling of idle servers, GPU-aware (``c.ScaleLabCulling.*``).

    With ``enabled``, the hub runs two services: jupyterhub-idle-culler
    (``scalelab-idle-culler``) and ScaleLab's GPU monitor (``scalelab-gpu-monitor``).

    Raises
    ------
    scalelab.common.strictconfig.UnknownSettingError
        When made with a misspelt setting in ``c.ScaleLabCulling``.
    traitlets.TraitError, ValueError
        A value out of range.
    """

    enabled = Bool(
        True,
        config=True,
        help="""Run the idle culler and the GPU monitor as hub services. False: neither runs
        (and no server is stopped for idleness).""",
    )
    idle_timeout = Integer(
        3600,
        min=0,
        config=True,
        help="""Seconds without activity (browser, API, executing kernel, busy GPU) after which
        jupyterhub-idle-culler stops a server; files are kept. 0: never cull for idleness.
        Example: `c.ScaleLabCulling.idle_timeout = 7200`.""",
    )
    cull_every = Integer(
        0,
        min=0,
        config=True,
        help="""Seconds between the culler's checks. 0 (the default): half of idle_timeout,
        jupyterhub-idle-culler's own default.""",
    )
    max_age = Integer(
        0,
        min=0,
        config=True,
        help="""Seconds after which a server is stopped even when active. 0 (the default): no
        limit. GPU sessions have their own limit, GPUPolicy.max_gpu_session_hours.""",
    )
    poll_interval = Float(
        60.0,
        config=True,
        help="""Seconds between the GPU monitor's looks at kernels and GPU utilisation. Keep it
        well under idle_timeout and gpu_idle_warning.""",
    )
    busy_threshold_pct = Float(
        5.0,
        config=True,
        help="""GPU utilisation (%, NVML's sample) above which a GPU counts as busy: its server is
        active. At or under it, the GPU is idle.""",
    )
    gpu_idle_timeout = Float(
        1800.0,
        config=True,
        help="""Seconds a server may hold GPUs that are all idle before it is stopped, so they
        return to the pool (files kept). 0: never stop for GPU idleness.""",
    )
    gpu_idle_warning = Float(
        600.0,
        config=True,
        help="""Seconds before that stop when the student is warned, once per idle spell: in
        the server log and before the next cell of each of the server's kernels.""",
    )

    @validate("poll_interval", "busy_threshold_pct", "gpu_idle_timeout", "gpu_idle_warning")
    def _non_negative(self, proposal):
        if proposal.value < 0 or (proposal.trait.name == "poll_interval" and proposal.value == 0):
            raise ValueError(
                f"c.ScaleLabCulling.{proposal.trait.name} must be positive, not {proposal.value}"
            )
        return proposal.value

    def rules(self) -> IdleRules:
        """The thresholds of :func:`decide`."""
        return IdleRules(self.busy_threshold_pct, self.gpu_idle_timeout, self.gpu_idle_warning)


def _guard(python: str) -> list[str]:
    """argv prefix that runs ``python`` so that it ends with the hub (see service_guard)."""
    return [python, "-m", "scalelab.hub_ext.services.service_guard", "--", python]


def culler_argv(s: ScaleLabCulling, python: str = sys.executable) -> list[str]:
    """argv of jupyterhub-idle-culler for the settings ``s``."""
    argv = [*_guard(python), "-m", "jupyterhub_idle_culler", f"--timeout={s.idle_timeout}"]
    if s.cull_every:
        argv.append(f"--cull-every={s.cull_every}")
    if s.max_age:
        argv.append(f"--max-age={s.max_age}")
    return argv


def monitor_argv(s: ScaleLabCulling, python: str = sys.executable) -> list[str]:
    """argv of ScaleLab's GPU monitor for the settings ``s``."""
    settings = {
        "poll_interval": s.poll_interval,
        "busy_threshold_pct": s.busy_threshold_pct,
        "gpu_idle_timeout": s.gpu_idle_timeout,
        "gpu_idle_warning": s.gpu_idle_warning,
    }
    return [
        *_guard(python),
        "-m",
        "scalelab.hub_ext.services.gpu_monitor",
        json.dumps(settings, sort_keys=True),
    ]


CULLER_SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers"]
MONITOR_SCOPES = [
    "list:users",
    "read:users:activity",
    "users:activity",
    "admin:servers",
    "access:servers",
    "proxy",
]


def services(s: ScaleLabCulling) -> tuple[list[dict], list[dict]]:
    """(services, roles) to add to ``c.JupyterHub.services`` / ``load_roles`` (pure)."""
    if not s.enabled:
        return [], []
    svcs = [{"name": "scalelab-gpu-monitor", "command": monitor_argv(s)}]
    roles = [
        {
            "name": "scalelab-gpu-monitor",
            "scopes": MONITOR_SCOPES,
            "services": ["scalelab-gpu-monitor"],
        }
    ]
    if s.idle_timeout:
        svcs.append({"name": "scalelab-idle-culler", "command": culler_argv(s)})
        roles.append(
            {
                "name": "scalelab-idle-culler",
                "scopes": CULLER_SCOPES,
                "services": ["scalelab-idle-culler"],
            }
        )
    return svcs, roles


def configure_culling(c: Config) -> ScaleLabCulling:
    """Read ``c.ScaleLabCulling``, then add the culler and the GPU monitor to ``c``'s services.

    Call it last in ``jupyterhub_config.py`` (``scalelab.configure(c)`` does), after every
    setting. Calling it again replaces what the first call added (services and roles named as
    in :data:`SERVICE_NAMES`) with the current settings: nothing is added twice.

    Raises
    ------
    scalelab.common.strictconfig.UnknownSettingError
        A misspelt ``c.ScaleLabCulling`` setting (a ``ValueError``); the message names it and
        the nearest real one.
    ValueError
        A value out of range; the message names it.
    """
    try:
        settings = ScaleLabCulling(config=c)
    except UnknownSettingError:
        raise
    except Exception as exc:  # noqa: BLE001 -- traitlets raises TraitError or ValueError
        raise ValueError(f"c.ScaleLabCulling: {exc}") from None
    svcs, roles = services(settings)
    hub = c.JupyterHub
    hub.services = [*_without_ours(hub["services"] if "services" in hub else []), *svcs]
    hub.load_roles = [*_without_ours(hub["load_roles"] if "load_roles" in hub else []), *roles]
    return settings


def _without_ours(entries: list[dict]) -> list[dict]:
    """``entries`` (services or roles) without those an earlier :func:`configure_culling` added."""
    return [e for e in entries if not (isinstance(e, dict) and e.get("name") in SERVICE_NAMES)]
