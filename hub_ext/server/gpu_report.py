"""A GPU server's report of its own GPUs' readings to the hub, from the node that holds them.

With ``SCALELAB_GPU_REPORT_S`` set, :class:`GPUReporter` reads the server's GPUs every that many
seconds (``c.GPUReporter.source_class``, NVML by default) and posts them to the hub's
``gpu-readings`` endpoint (:mod:`scalelab.hub_ext.hub.gpu_reports`); :func:`slurm_gpus` names
a Slurm job's GPUs. Why: docs/design-notes.md, scalelab.hub_ext.server.gpu_report.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.ioloop import PeriodicCallback
from traitlets import Type
from traitlets.config import LoggingConfigurable

from scalelab import envvars
from scalelab.common.gpu_inventory import slurm_gpu_id
from scalelab.common.gpu_source import GPUSource, NVMLGPUs, Reading


def slurm_gpus(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The GPUs of the Slurm job whose environment is ``environ`` (pure): (the hub's name,
    ``"<node>/gpu<index>"``; the device that CUDA and NVML know it by on the node, an index or
    a UUID as text) for each, in Slurm's order. Empty outside a Slurm job or in one without GPUs.

    The node is ``SLURMD_NODENAME``; the GRES indices are ``SLURM_JOB_GPUS`` (the node's own
    numbering, even where cgroups constrain the devices; ``SLURM_STEP_GPUS`` when that is
    unset). The devices are ``CUDA_VISIBLE_DEVICES``, which Slurm writes in the same order (the
    node's indices, or 0..N-1 where the job's cgroup shows only its own GPUs); where it does
    not give one device per GPU, the GRES indices are taken as the devices.
    """
    node = environ.get("SLURMD_NODENAME", "")
    indices = [
        i for i in environ.get("SLURM_JOB_GPUS", environ.get("SLURM_STEP_GPUS", "")).split(",") if i
    ]
    if not node or not indices:
        return []
    devices = [d for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    if len(devices) != len(indices):
        devices = indices
    return [
        (slurm_gpu_id(node, index), device) for index, device in zip(indices, devices, strict=True)
    ]


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

    def __init__(
        self,
        granted: list[str],
        url: str,
        token: str,
        server: str,
        slurm: Sequence[tuple[str, str]] = (),
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.slurm = list(slurm)
        self.granted = granted or [name for name, _ in self.slurm]
        self.url = url
        self.token = token
        self.server = server
        self.source = self.source_class(parent=self)
        self.callback: PeriodicCallback | None = None
        self._failing = False

    def read(self) -> dict[str, Reading]:
        """The readings of the server's GPUs (blocking: NVML): by the names it was granted (or,
        in a Slurm job, the hub's names of its GPUs) where its source knows them; else, in a
        Slurm job, its devices' readings under the hub's names; else every GPU it sees."""
        readings = self.source.utilization(self.granted)
        if readings:
            return readings
        if self.slurm:
            return self.read_slurm()
        seen = [gpu.uuid for gpu in self.source.discover().gpus]
        return self.source.utilization(seen)

    def read_slurm(self) -> dict[str, Reading]:
        """The readings of the job's devices (``CUDA_VISIBLE_DEVICES``: an index among the GPUs
        the source sees, or a UUID), each under the hub's name of its GPU (blocking)."""
        seen = self.source.discover().gpus
        by_device = {gpu.uuid: gpu.uuid for gpu in seen} | {str(g.index): g.uuid for g in seen}
        uuids = {name: by_device[device] for name, device in self.slurm if device in by_device}
        readings = self.source.utilization(list(uuids.values()))
        return {name: readings[uuid] for name, uuid in uuids.items() if uuid in readings}

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
    slurm = [] if granted else slurm_gpus(os.environ)
    reporter = GPUReporter(granted, url, token, server, slurm, parent=serverapp)
    # serverapp.io_loop: jupyter_server's loop for extensions' background tasks
    serverapp.io_loop.add_callback(reporter.report)
    reporter.callback = PeriodicCallback(reporter.report, float(period) * 1000)
    reporter.callback.start()
    serverapp.log.info("ScaleLab reports this server's GPU readings every %s s", period)
    return reporter
