"""The GPU sources under the path that configurations name (``gpu_source_class =
"scalelab.spawner.gpu_source.NVMLGPUs"``): they live in :mod:`scalelab.common.gpu_source`,
shared by the hub and the single-user servers (which read their own GPUs,
:mod:`scalelab.hub_ext.server.gpu_report`)."""

from __future__ import annotations

from scalelab.common.gpu_source import (
    DeclaredGPUs,
    DeclaredReadings,
    GPUSource,
    NVMLGPUs,
    Reading,
    ReportedGPUs,
    source_class,
)

__all__ = [
    "DeclaredGPUs",
    "DeclaredReadings",
    "GPUSource",
    "NVMLGPUs",
    "Reading",
    "ReportedGPUs",
    "source_class",
]
