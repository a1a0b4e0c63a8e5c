"""The idle-GPU warning's JupyterLab notification: its payloads (pure) and the prebuilt
frontend extension that shows it, installed by ``pip install`` (no Node build)."""

from __future__ import annotations

import calendar
import configparser
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

from scalelab.hub_ext.services import lab_toast
from tests.conftest import REPO

EXTENSION = "jupyterlab-notifications-extension"


def _epoch(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S")))


def test_the_stop_time_is_a_utc_clock_time_never_earlier_than_the_stop():
    assert lab_toast.stop_time_utc(_epoch("2027-05-20 08:41:00")) == "08:41 UTC"
    assert lab_toast.stop_time_utc(_epoch("2027-05-20 08:41:01")) == "08:42 UTC"
    assert lab_toast.stop_time_utc(_epoch("2027-05-20 23:59:30")) == "00:00 UTC"


def test_the_warning_is_a_lasting_warning_toast_naming_gpu_idle_time_and_stop():
    gpu = "GPU-5f1c2b7a-0d1e-4c3b-9a8f-1234567890ab"  # an NVML UUID: 40 characters
    now = _epoch("2027-05-20 08:31:00")
    payload = lab_toast.idle_gpu_warning([gpu], 20 * 60, now + 600, now)
    assert payload["type"] == "warning"
    assert payload["autoClose"] is False  # stays until dismissed
    assert payload["immediate"] is True  # pushed to open tabs at once, not at the next poll
    message = payload["message"]
    assert message == (
        f"ScaleLab: GPU {gpu} idle for 20 min: your server stops at about 08:41 UTC "
        "(in 10 min); files are kept."
    )
    assert len(message) <= lab_toast.TOAST_VISIBLE_CHARS  # JupyterLab shows it whole
    json.dumps(payload, allow_nan=False)  # what the extension's ingest handler requires


def test_a_warning_read_late_never_says_a_negative_time():
    now = _epoch("2027-05-20 08:31:00")
    message = lab_toast.idle_gpu_warning(["GPU-a", "GPU-b"], 45, now - 5, now)["message"]
    assert "GPU GPU-a, GPU-b idle for 45 s" in message
    assert "stops at about 08:31 UTC (in 0 s)" in message


def test_the_withdrawal_names_the_gpus_and_closes_by_itself():
    payload = lab_toast.idle_gpu_withdrawn(("GPU-fake-0000", "GPU-fake-0001"))
    assert payload["type"] == "info"
    assert payload["autoClose"] == lab_toast.WITHDRAWN_AUTO_CLOSE_MS
    assert "GPU-fake-0000, GPU-fake-0001 are in use again" in payload["message"]
    assert "will not be stopped" in payload["message"]


def test_the_pinned_frontend_extension_is_installed_and_enabled_in_this_prefix():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    pins = [
        line.strip()
        for line in cfg["options"]["install_requires"].splitlines()
        if line.strip().startswith(EXTENSION)
    ]
    assert pins == [f"{EXTENSION}=={version(EXTENSION)}"]
    prefix = Path(sys.prefix)
    labext = prefix / "share/jupyter/labextensions/jupyterlab_notifications_extension"
    assert json.loads((labext / "package.json").read_text())["version"] == version(EXTENSION)
    assert list((labext / "static").glob("remoteEntry.*.js"))  # prebuilt: no Node build
    enable = prefix / "etc/jupyter/jupyter_server_config.d/jupyterlab_notifications_extension.json"
    server_extensions = json.loads(enable.read_text())["ServerApp"]["jpserver_extensions"]
    assert server_extensions == {"jupyterlab_notifications_extension": True}
    assert lab_toast.INGEST_PATH.startswith("jupyterlab-notifications-extension/")
