"""Where a hub's GPUs and their readings come from: one small interface, one class per source.

:class:`GPUSource` (``discover``, ``busy``, ``utilization``; each may block, so the hub asks in a
worker thread) and its sources :class:`NVMLGPUs`, :class:`DeclaredGPUs`, :class:`ReportedGPUs`
(reports kept by :class:`ServerReports`) and :class:`DeclaredReadings`; ``gpu_source_class``
picks one. Why: docs/design-notes.md, scalelab.common.gpu_source.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from traitlets import Dict, Float, List
from traitlets.config import LoggingConfigurable

from scalelab.common.gpu_inventory import (
    GPUInventory,
    declared_inventory,
    discover_nvml,
    nvml_processes,
    nvml_utilization,
)
from scalelab.common.strictconfig import StrictConfigurable

#: One GPU's reading: (utilisation in %, memory in use in MiB or None when unknown).
Reading = tuple[float, int | None]


class GPUSource(StrictConfigurable, LoggingConfigurable):
    """The GPUs a hub may hand out, and what can be read of them (abstract; see the module).

    Subclasses implement :meth:`discover`; :meth:`busy` and :meth:`utilization` default to
    "nothing can be told" (never busy, no readings). A source is made once per hub, and once
    more by the configuration check before the hub starts: it does no I/O when made.

    Raises
    ------
    scalelab.common.strictconfig.UnknownSettingError
        When made with a configuration whose ``c.<ClassName>`` names a setting it does not have.
    """

    def discover(self) -> GPUInventory:
        """The allocatable GPUs (may block; called in a worker thread, once per hub).

        Returns
        -------
        GPUInventory
            The GPUs, ``source`` naming where they came from; an empty inventory with a
            ``reason`` when there are none. Raises only for a misconfiguration.
        """
        raise NotImplementedError

    def busy(self, uuid: str) -> str | None:
        """Why the released GPU ``uuid`` is still in use (one line), or None when it is free or
        nothing can be told (may block; called in a worker thread). A GPU found busy is
        quarantined until a later check finds it free."""
        return None

    def utilization(self, uuids: Sequence[str]) -> dict[str, Reading]:
        """Readings of the GPUs ``uuids`` (may block; called in a worker thread).

        Returns
        -------
        dict
            uuid -> (utilisation %, memory in use in MiB or None), for the GPUs that could be
            read; a GPU missing here is unknown (never idle). Default: none can be read.
        """
        return {}


class NVMLGPUs(GPUSource):
    """The host's GPUs as NVML sees them (MIG instances as devices of their own); the default
    when ``declared_gpus`` is empty. Without an NVIDIA driver the inventory is empty and servers
    run CPU-only."""

    def discover(self) -> GPUInventory:
        """:func:`~scalelab.common.gpu_inventory.discover_nvml` (blocking)."""
        return discover_nvml()

    def busy(self, uuid: str) -> str | None:
        """The processes NVML shows holding memory on ``uuid`` (blocking)."""
        return nvml_processes(uuid)

    def utilization(self, uuids: Sequence[str]) -> dict[str, Reading]:
        """NVML's utilisation sample and memory in use (blocking; MIG instances are unknown)."""
        return dict(nvml_utilization(uuids))


class DeclaredGPUs(GPUSource):
    """The inventory declared in ``ScaleLabSpawner.declared_gpus`` (tests, hosts NVML cannot
    see); the default when that list is set. Logged as DECLARED: released GPUs are never found
    busy and their utilisation is unknown, so the GPU monitor never stops a server for an idle
    declared GPU."""

    declared = List(
        Dict(),
        help="""The declared GPUs, as in `ScaleLabSpawner.declared_gpus` (which the spawner
        passes here): [{"uuid": "GPU-test-0", "name": "...", "memory_mib": 81920}].""",
    )

    def __init__(self, declared: Sequence[Mapping[str, Any]] = (), **kwargs: Any) -> None:
        super().__init__(declared=[dict(entry) for entry in declared], **kwargs)

    def discover(self) -> GPUInventory:
        """The declared inventory (pure).

        Raises
        ------
        ValueError
            As :func:`~scalelab.common.gpu_inventory.declared_inventory`.
        """
        return declared_inventory(self.declared)


class ServerReports(GPUSource):
    """Readings reported by the single-user servers that hold the GPUs
    (``POST /hub/api/scalelab/users/<user>/gpu-readings``,
    :mod:`scalelab.hub_ext.hub.gpu_reports`), read there through NVML, kept for the GPU board
    and the GPU monitor: the part of a GPU source that takes reports, shared by
    :class:`ReportedGPUs` (declared inventory) and the Slurm spawner's ``SlurmGPUs`` (the
    cluster's GRES). A reading older than ``max_age_s``, or none, is unknown: never idle."""

    max_age_s = Float(
        120.0,
        min=1.0,
        config=True,
        help="""Seconds a server's GPU reading stays valid on the hub; older, the GPU's
        utilisation is unknown (the GPU monitor never stops a server for it). Servers report
        every `ScaleLabSpawner.gpu_report_interval` seconds.""",
    )

    #: Whether servers should report their GPUs' readings to the hub (see the spawner's
    #: ``gpu_report_environment``).
    wants_reports = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._reports: dict[str, tuple[Reading, float]] = {}

    def record(self, readings: Mapping[str, Reading], now: float | None = None) -> None:
        """Keep ``readings`` (uuid -> reading) as of ``now`` (seconds since the epoch)."""
        at = time.time() if now is None else now
        with self._lock:
            for uuid, reading in readings.items():
                self._reports[uuid] = (reading, at)

    def utilization(self, uuids: Sequence[str]) -> dict[str, Reading]:
        """The last reported reading of each GPU of ``uuids`` not older than ``max_age_s``."""
        oldest = time.time() - self.max_age_s
        with self._lock:
            return {
                uuid: reading
                for uuid in uuids
                if (report := self._reports.get(uuid)) is not None
                for reading, at in [report]
                if at >= oldest
            }


class ReportedGPUs(ServerReports, DeclaredGPUs):
    """GPUs on other nodes than the hub's (Kubernetes, or any spawner whose servers' nodes the
    hub cannot read): the inventory is declared (``ScaleLabSpawner.declared_gpus``), and each
    GPU's reading is the one the single-user server holding it last reported
    (:class:`ServerReports`). ``c.ReportedGPUs.max_age_s``: how long a reading stays valid."""


class DeclaredReadings(GPUSource):
    """Declared GPUs with declared readings, for a server's report where NVML cannot run (this
    machine has no GPU): ``c.DeclaredReadings.readings = {"GPU-node1-0": [35.0, 2048]}``.
    The inventory is these GPUs; their readings never change."""

    readings = Dict(
        value_trait=List(minlen=2, maxlen=2),
        config=True,
        help="""uuid -> [utilisation %, memory in use in MiB or null] of each declared GPU.""",
    )

    def discover(self) -> GPUInventory:
        """The GPUs of ``readings``, declared (pure)."""
        return declared_inventory([{"uuid": uuid} for uuid in self.readings])

    def utilization(self, uuids: Sequence[str]) -> dict[str, Reading]:
        """The declared readings of ``uuids`` (those declared)."""
        return {
            uuid: (float(self.readings[uuid][0]), self.readings[uuid][1])
            for uuid in uuids
            if uuid in self.readings
        }


def source_class(chosen: type[GPUSource] | None, declared: bool) -> type[GPUSource]:
    """The source of a spawner (pure): ``chosen`` (its ``gpu_source_class``) when set, else
    :class:`DeclaredGPUs` when GPUs are ``declared``, else :class:`NVMLGPUs`."""
    if chosen is not None:
        return chosen
    return DeclaredGPUs if declared else NVMLGPUs
