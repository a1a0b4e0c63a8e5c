"""The GPU-aware culling rules (pure, table-tested) and their configuration."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from traitlets.config import Config

from scalelab.common.ports import free_port
from scalelab.common.strictconfig import UnknownSettingError
from scalelab.hub_ext.server.notices import clear_notice, read_notice, write_notice
from scalelab.hub_ext.services.culling import (
    NONE,
    STOP,
    WARN,
    IdleRules,
    ScaleLabCulling,
    ServerObservation,
    configure_culling,
    decide,
)
from scalelab.kernels.notices import new_notice

RULES = IdleRules(busy_threshold_pct=5, gpu_idle_timeout_s=1800, gpu_idle_warning_s=600)
G0, G1 = "GPU-fake-0", "GPU-fake-1"
T = 1_000_000.0

# (case, observation, idle since, warned, expected active, action, idle since after)
CASES = [
    ("cpu server, idle kernel", ServerObservation(False), None, False, False, NONE, None),
    ("cpu server, executing kernel", ServerObservation(True), None, False, True, NONE, None),
    ("busy GPU", ServerObservation(False, (G0,), {G0: 80}), T - 5000, True, True, NONE, None),
    ("one of two GPUs busy", ServerObservation(False, (G0, G1), {G0: 0, G1: 50}), T - 9000,
     False, True, NONE, None),
    ("at the threshold is idle", ServerObservation(False, (G0,), {G0: 5}), None, False, False,
     NONE, T),
    ("unknown utilisation is never idle", ServerObservation(False, (G0,), {}), T - 9000, False,
     False, NONE, None),
    ("one GPU unknown", ServerObservation(False, (G0, G1), {G0: 0}), T - 9000, False, False,
     NONE, None),
    ("idle GPU, before the warning", ServerObservation(False, (G0,), {G0: 0}), T - 1000, False,
     False, NONE, T - 1000),
    ("idle GPU, in the warning window", ServerObservation(False, (G0,), {G0: 0}), T - 1200,
     False, False, WARN, T - 1200),
    ("already warned", ServerObservation(False, (G0,), {G0: 0}), T - 1500, True, False, NONE,
     T - 1500),
    ("idle GPU past the timeout", ServerObservation(False, (G0,), {G0: 0}), T - 1800, True,
     False, STOP, T - 1800),
    ("executing kernel on an idle GPU is stopped", ServerObservation(True, (G0,), {G0: 0}),
     T - 1900, True, True, STOP, T - 1900),
]  # fmt: skip


@pytest.mark.parametrize(
    "obs, since, warned, active, action, since_after",
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_decide(obs, since, warned, active, action, since_after):
    decision = decide(obs, RULES, T, since, warned)
    assert (decision.active, decision.action, decision.gpu_idle_since) == (
        active,
        action,
        since_after,
    )


def test_warning_and_stop_reasons_name_the_gpu_the_time_and_that_files_are_kept():
    warn = decide(ServerObservation(False, (G0,), {G0: 0}), RULES, T, T - 1200, False)
    assert G0 in warn.reason and "idle" in warn.reason
    assert "stopped in about 10 min" in warn.reason and "files are kept" in warn.reason
    stop = decide(ServerObservation(False, (G0,), {G0: 1}), RULES, T, T - 2400, True)
    assert "stayed at or under 5 % for 40 min (limit 30 min)" in stop.reason
    soon = decide(ServerObservation(False, (G0,), {G0: 0}), IdleRules(5, 60, 50), T, T - 30, False)
    assert "idle (at or under 5 %) for 30 s" in soon.reason


def test_zero_gpu_idle_timeout_never_stops():
    rules = IdleRules(5, 0, 600)
    decision = decide(ServerObservation(False, (G0,), {G0: 0}), rules, T, T - 10**6, True)
    assert decision.action == NONE


def test_configure_culling_adds_both_services_with_their_roles():
    c = Config()
    c.JupyterHub.services = [{"name": "mine", "api_token": "x" * 32}]
    c.ScaleLabCulling.idle_timeout = 7200
    c.ScaleLabCulling.cull_every = 300
    configure_culling(c)
    names = [s["name"] for s in c.JupyterHub.services]
    assert names == ["mine", "scalelab-gpu-monitor", "scalelab-idle-culler"]
    culler = c.JupyterHub.services[2]["command"]
    # ends with the hub
    assert culler[1:4] == ["-m", "scalelab.hub_ext.services.service_guard", "--"]
    assert culler[5:] == ["-m", "jupyterhub_idle_culler", "--timeout=7200", "--cull-every=300"]
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert "delete:servers" in roles["scalelab-idle-culler"]["scopes"]
    assert roles["scalelab-gpu-monitor"]["services"] == ["scalelab-gpu-monitor"]


def test_configure_culling_twice_adds_each_service_and_role_once():
    c = Config()
    c.JupyterHub.services = [{"name": "mine", "api_token": "x" * 32}]
    c.JupyterHub.load_roles = [{"name": "mine", "scopes": ["list:users"], "services": ["mine"]}]
    configure_culling(c)
    first = (list(c.JupyterHub.services), list(c.JupyterHub.load_roles))
    configure_culling(c)  # e.g. an operator's own call, then scalelab.configure(c)'s
    assert (c.JupyterHub.services, c.JupyterHub.load_roles) == first
    assert [s["name"] for s in c.JupyterHub.services] == [
        "mine",
        "scalelab-gpu-monitor",
        "scalelab-idle-culler",
    ]
    assert [r["name"] for r in c.JupyterHub.load_roles] == [
        "mine",
        "scalelab-gpu-monitor",
        "scalelab-idle-culler",
    ]
    c.ScaleLabCulling.idle_timeout = 0  # a second call follows the settings of its time
    configure_culling(c)
    assert [s["name"] for s in c.JupyterHub.services] == ["mine", "scalelab-gpu-monitor"]
    assert [r["name"] for r in c.JupyterHub.load_roles] == ["mine", "scalelab-gpu-monitor"]


def test_a_misspelt_culling_setting_is_one_message_naming_the_nearest_one():
    c = Config()
    c.ScaleLabCulling.idle_timout = 60
    with pytest.raises(UnknownSettingError) as caught:
        configure_culling(c)
    assert str(caught.value) == (
        "c.ScaleLabCulling has unknown setting(s) ['idle_timout'] "
        "(did you mean 'idle_timout' -> 'idle_timeout'?)"
    )
    assert c.JupyterHub.get("services", []) == []  # nothing added


def test_culling_can_be_disabled_and_idle_timeout_zero_drops_the_culler():
    c = Config()
    c.ScaleLabCulling.enabled = False
    configure_culling(c)
    assert c.JupyterHub.services == []
    c = Config()
    c.ScaleLabCulling.idle_timeout = 0
    configure_culling(c)
    assert [s["name"] for s in c.JupyterHub.services] == ["scalelab-gpu-monitor"]


@pytest.mark.parametrize(
    "key, value, message",
    [
        (
            "idle_timout",
            60,
            "c.ScaleLabCulling has unknown setting(s) ['idle_timout'] "
            "(did you mean 'idle_timout' -> 'idle_timeout'?)",
        ),
        ("idle_timeout", -1, "should not be less than 0"),
        ("poll_interval", 0, "c.ScaleLabCulling.poll_interval must be positive"),
        ("gpu_idle_timeout", -5, "c.ScaleLabCulling.gpu_idle_timeout must be positive"),
    ],
)
def test_bad_culling_settings_are_errors_that_name_them(key, value, message):
    c = Config()
    c.ScaleLabCulling[key] = value
    with pytest.raises(ValueError, match=re.escape(message)):
        configure_culling(c)


def test_default_settings_are_documented_in_the_help():
    s = ScaleLabCulling()
    assert (s.idle_timeout, s.gpu_idle_timeout, s.gpu_idle_warning) == (3600, 1800.0, 600.0)
    for name, trait in ScaleLabCulling.class_traits(config=True).items():
        assert trait.help.strip(), f"{name} has no help"


def test_a_notice_is_shown_once_per_kernel_and_can_be_withdrawn(tmp_path):
    path = tmp_path / "notice.json"
    seen: set[str] = set()
    assert new_notice(str(path), seen) is None
    written = write_notice(path, "your GPU is idle")
    assert read_notice(path)["id"] == written["id"]
    assert new_notice(str(path), seen) == "your GPU is idle"
    assert new_notice(str(path), seen) is None  # once
    assert new_notice(str(path), set()) == "your GPU is idle"  # another kernel sees it too
    assert clear_notice(path) and read_notice(path) is None
    path.write_text("{broken")
    assert new_notice(str(path), set()) is None


def test_a_guarded_service_ends_when_the_hub_is_killed(tmp_path):
    """The hub stands in as a parent process that is SIGKILLed; its guarded child must end."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-m', "
            "'scalelab.hub_ext.services.service_guard', "
            "'--', sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
            "time.sleep(600)\n",
        ]
    )
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the guarded child never started"
            time.sleep(0.1)
        child = psutil.Process(int(pid_file.read_text()))
        time.sleep(1)  # the guard has exec'd the service by now
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        child.wait(timeout=30)  # raises TimeoutExpired if the service outlived the "hub"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    "sig, ignored",
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["SIGINT", "SIGTERM", "SIGINT-ignored-by-the-hub"],
)
def test_gpu_monitor_stops_quietly_when_the_hub_stops_it(sig: signal.Signals, ignored: bool):
    """The hub stops its services with SIGINT, then SIGTERM: one line, no traceback.

    ``ignored``: the hub was started with SIGINT ignored (``scalelab up &`` from a script: a
    shell's background job inherits SIG_IGN, and Python then installs no KeyboardInterrupt
    handler), and the monitor must still stop at the hub's SIGINT (it ran on, 60 s, in such a run).
    """
    settings = {
        "busy_threshold_pct": 5.0,
        "gpu_idle_timeout": 60,
        "gpu_idle_warning": 30,
        "poll_interval": 1,
    }
    env = {
        **os.environ,
        "JUPYTERHUB_API_URL": f"http://127.0.0.1:{free_port()}/hub/api",  # nothing answers
        "JUPYTERHUB_API_TOKEN": "not-a-real-token",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "scalelab.hub_ext.services.gpu_monitor", json.dumps(settings)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_ignore_sigint if ignored else None,
    )
    try:
        time.sleep(3)  # a poll or two fail (logged, retried): the monitor keeps running
        assert proc.poll() is None
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, out
    assert "poll failed, retrying" in out
    assert "stopped by the hub" in out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
