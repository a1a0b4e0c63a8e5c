"""A GPU source for tests: declared GPUs whose utilisation a test writes to a JSON file.

This machine has no GPU, so a test hub declares its GPUs and plugs this source in by
configuration, where a real hub would use NVML::

    c.ScaleLabSpawner.declared_gpus = [{"uuid": "GPU-fake-0000"}, ...]
    c.ScaleLabSpawner.gpu_source_class = "tests.support.fake_gpus.FileReadingsGPUs"
    c.FileReadingsGPUs.readings_file = "<test tmp dir>/utilization.json"  # {"GPU-fake-0000": 90}

The hub then needs the repository root on ``PYTHONPATH``. The readings reach the GPU board,
the GPU monitor and the culler through the one path real readings take.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from traitlets import Unicode

from scalelab.common.gpu_source import DeclaredGPUs, Reading

#: The source's import path, for ``c.<Spawner>.gpu_source_class``.
IMPORT_PATH = "tests.support.fake_gpus.FileReadingsGPUs"


class FileReadingsGPUs(DeclaredGPUs):
    """Declared GPUs whose utilisation (%) is read from ``readings_file`` at every reading.

    Memory in use is unknown. A GPU missing from the file, or a file that cannot be read, is
    unknown (never idle). Each new content is logged as FAKE in the hub's log.
    """

    readings_file = Unicode(
        "",
        config=True,
        help="""JSON file `{"<uuid>": <percent>}` with the GPUs' utilisation. Empty: none
        can be read.""",
    )

    _seen: dict[str, float] | None = None

    def utilization(self, uuids: Sequence[str]) -> dict[str, Reading]:
        """uuid -> (the file's percent, None) for the GPUs of ``uuids`` named in the file."""
        if not self.readings_file:
            return {}
        try:
            readings = json.loads(Path(self.readings_file).read_text())
        except (OSError, ValueError) as exc:
            self.log.error("FAKE GPU utilisation file %s unreadable: %s", self.readings_file, exc)
            return {}
        if readings != self._seen:
            self.log.warning("FAKE GPU utilisation from %s: %s", self.readings_file, readings)
            self._seen = readings
        return {uuid: (float(readings[uuid]), None) for uuid in uuids if uuid in readings}


class FailingGPUs(DeclaredGPUs):
    """Declared GPUs whose source raises on every reading and busy check while ``failing`` is
    True, as NVML does after a driver upgrade ("Driver/library version mismatch") or an exporter
    that went away; with ``failing`` False every GPU reads 5 % and is free."""

    failing = True

    def utilization(self, uuids: Sequence[str]) -> dict[str, Reading]:
        if self.failing:
            raise RuntimeError("NVML: Driver/library version mismatch")
        return {uuid: (5.0, None) for uuid in uuids}

    def busy(self, uuid: str) -> str | None:
        if self.failing:
            raise RuntimeError("NVML: Driver/library version mismatch")
        return None


#: :class:`FailingGPUs`' import path.
FAILING_PATH = "tests.support.fake_gpus.FailingGPUs"
