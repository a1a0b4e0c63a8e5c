"""Prometheus series of ScaleLab's GPUs, served by the hub's own ``/hub/metrics``.

Gauges read from the allocator at scrape time (``scalelab_gpus_*``,
``scalelab_gpu_queue_length``, ``scalelab_spark_executor_gpus_granted``); the spawner updates
``scalelab_gpu_queue_wait_seconds`` and ``scalelab_gpu_hours_total`` as GPUs come and go, the
pool ``scalelab_gpu_source_errors_total`` when its GPU source raises.
Why: docs/design-notes.md, scalelab.spawner.metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from scalelab.spawner.allocator import GPUAllocator

QUEUE_WAIT = Histogram(
    "scalelab_gpu_queue_wait_seconds",
    "Seconds a granted GPU request waited in the queue",
    buckets=(1, 10, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400, float("inf")),
)
GPU_HOURS = Counter(
    "scalelab_gpu_hours",
    "GPU-hours used by servers, by JupyterHub group of their user ('' for none)",
    ["group"],
)

GPU_SOURCE_ERRORS = Counter(
    "scalelab_gpu_source_errors",
    "Calls to the hub's GPU source that raised (its GPUs' readings unknown, or a released GPU "
    "kept out until the source can check it), by call",
    ["call"],
)


def record_gpu_hours(groups: Iterable[str], gpus: int, seconds: float) -> None:
    """Add ``gpus * seconds`` of use to each of the user's groups (or to ``""``)."""
    hours = gpus * max(seconds, 0.0) / 3600.0
    for group in list(groups) or [""]:
        GPU_HOURS.labels(group=group).inc(hours)


class AllocatorCollector(Collector):
    """Gauges read from the hub's allocator at each scrape."""

    def __init__(self, allocator: Callable[[], GPUAllocator | None]):
        self._allocator = allocator

    def collect(self):
        allocator = self._allocator()
        inventory = len(allocator.ledger.inventory) if allocator else 0
        held = sum(len(h.gpus) for h in allocator.ledger.holdings()) if allocator else 0
        quarantined = len(allocator.ledger.quarantined()) if allocator else 0
        queued = len(allocator.queue) if allocator else 0
        spark = sum(g.gpus for g in allocator.spark.all()) if allocator else 0
        for name, doc, value in (
            ("scalelab_gpus_total", "GPUs in the inventory", inventory),
            ("scalelab_gpus_allocated", "GPUs held by servers", held),
            ("scalelab_gpus_quarantined", "GPUs kept out: memory still in use", quarantined),
            ("scalelab_gpu_queue_length", "GPU requests waiting", queued),
            (
                "scalelab_spark_executor_gpus_granted",
                "Executor GPUs granted to Spark applications on a cluster",
                spark,
            ),
        ):
            yield GaugeMetricFamily(name, doc, value=value)


_registered: list[AllocatorCollector] = []


def register_collector(allocator: Callable[[], GPUAllocator | None]) -> None:
    """Register the gauges once per process."""
    if not _registered:
        collector = AllocatorCollector(allocator)
        REGISTRY.register(collector)
        _registered.append(collector)
