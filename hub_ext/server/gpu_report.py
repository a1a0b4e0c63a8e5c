"""A GPU server's report of its own GPUs' readings to the hub, from the node that holds them.

When the spawner sets ``SCALELAB_GPU_REPORT_S`` (the hub's GPU source takes reports:
:class:`~scalelab.spawner.gpu_source.ReportedGPUs`), the server reads its GPUs every that many
seconds through a GPU source of its own (``c.GPUReporter.source_class``: NVML by default) and
posts them to ``POST $JUPYTERHUB_API_URL/scalelab/users/$JUPYTERHUB_USER/gpu-readings`` with its
own hub token, as ``jupyterhub-singleuser`` posts its activity
(:mod:`scalelab.hub_ext.hub.gpu_reports` says why a push, and what the hub keeps).

Which GPUs: those of ``SCALELAB_GPUS`` the source can see (a shared host's NVML sees them all);
when it sees none of them (a container whose device plugin picked the devices, whose UUIDs are
not the ledger's), every GPU it sees. A failed read or post is logged (once until it works
again) and tried again at the next period; it never stops the server.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.ioloop import PeriodicCallback
from traitlets import Type
from traitlets.config import LoggingConfigurable

from scalelab import envvars
from scalelab.common.gpu_source import GPUSource, NVMLGPUs, Reading


class GPUReporter(LoggingConfigurable):
    """Reads the server's GPUs and posts them to the hub (see the module docstring)."""

    source_class = Type(
        default_value=NVMLGPUs,
        klass=GPUSource,
        config=True,
        help="""Where the server reads its GPUs: `scalelab.spawner.gpu_source.NVMLGPUs` (the
        default, NVML on the server's node), or `scalelab.spawner.gpu_source.DeclaredReadings`
        (declared readings, `c.DeclaredReadings.readings`: where NVML cannot run, e.g.
        tests). Set in the servers' Jupyter configuration (or their arguments,
        `c.ScaleLabSpawner.args`).""",
    )

    def __init__(self, granted: list[str], url: str, token: str, server: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.granted = granted
        self.url = url
        self.token = token
        self.server = server
        self.source = self.source_class(parent=self)
        self.callback: PeriodicCallback | None = None
        self._failing = False

    def read(self) -> dict[str, Reading]:
        """The readings of the server's GPUs (blocking: NVML)."""
        readings = self.source.utilization(self.granted)
        if readings:
            return readings
        seen = [gpu.uuid for gpu in self.source.discover().gpus]
        return self.source.utilization(seen)

    def body(self, readings: dict[str, Reading]) -> dict[str, Any]:
        """The report (pure): ``{"server", "gpus": [{"uuid", "utilization_pct",
        "memory_used_mib"}]}``."""
        return {
            "server": self.server,
            "gpus": [
                {"uuid": uuid, "utilization_pct": util, "memory_used_mib": used}
                for uuid, (util, used) in readings.items()
            ],
        }

    async def report(self) -> None:
        """Read and post once; a failure is logged, never raised."""
        try:
            readings = await asyncio.to_thread(self.read)
            if not readings:
                return
            request = HTTPRequest(
                self.url,
                method="POST",
                headers={
                    "Authorization": f"token {self.token}",
                    "Content-Type": "application/json",
                },
                body=json.dumps(self.body(readings)),
                request_timeout=30,
            )
            await AsyncHTTPClient().fetch(request)
        except (OSError, HTTPClientError, RuntimeError, ValueError) as exc:
            if not self._failing:
                self.log.warning("ScaleLab could not report the GPU readings to the hub: %s", exc)
            self._failing = True
            return
        if self._failing:
            self.log.info("ScaleLab reports the GPU readings to the hub again")
        self._failing = False


def setup(serverapp: Any) -> GPUReporter | None:
    """Start reporting when the spawner asked for it (``SCALELAB_GPU_REPORT_S``) and the server
    runs under a hub; None otherwise."""
    period = os.environ.get(envvars.GPU_REPORT_S)
    api_url = os.environ.get("JUPYTERHUB_API_URL")
    token = os.environ.get("JUPYTERHUB_API_TOKEN")
    user = os.environ.get("JUPYTERHUB_USER")
    if not (period and api_url and token and user):
        return None
    granted = [u for u in os.environ.get(envvars.GPUS, "").split(",") if u]
    url = f"{api_url.rstrip('/')}/scalelab/users/{quote(user, safe='')}/gpu-readings"
    server = os.environ.get("JUPYTERHUB_SERVER_NAME", "")
    reporter = GPUReporter(granted, url, token, server, parent=serverapp)
    # serverapp.io_loop: jupyter_server's loop for extensions' background tasks
    serverapp.io_loop.add_callback(reporter.report)
    reporter.callback = PeriodicCallback(reporter.report, float(period) * 1000)
    reporter.callback.start()
    serverapp.log.info("ScaleLab reports this server's GPU readings every %s s", period)
    return reporter
