"""Idle PySpark kernels culled, with a notice the student reads in the next kernel.

An idle notebook's PySpark kernel holds its Spark application: on YARN its application master and
executors keep their containers (one student's three idle kernels held 7,680 of 8,192 MB of the
test cluster), on a standalone cluster its cores. :class:`ScaleLabKernelManager` is Jupyter
Server's own kernel manager with its culling (``cull_idle_timeout``, ``cull_interval``,
``cull_connected``: see jupyter_server's ``MappingKernelManager``) kept to the kernel flavours in
``cull_flavours`` (ScaleLab's PySpark kernels by default; every other kernel lives on as in plain
Jupyter); a culled kernel leaves a notice (:mod:`scalelab.hub_ext.server.notices`) that each
kernel prints before the student's next cell.
"""

from __future__ import annotations

import os

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from traitlets import List, Unicode

from scalelab import envvars
from scalelab.hub_ext.server.notices import write_notice


class ScaleLabKernelManager(AsyncMappingKernelManager):
    """Jupyter Server's kernel manager, culling only the kernels of ``cull_flavours``."""

    cull_flavours = List(
        Unicode(),
        default_value=["pyspark"],
        config=True,
        help="""Kernel flavours (a ScaleLab kernelspec's `metadata.scalelab.flavour`: pyspark,
        tensorflow, pytorch) that `cull_idle_timeout` applies to; other kernels are never
        culled.""",
    )

    def _metadata(self, kernel_id: str) -> dict:
        try:
            return dict(self.get_kernel(kernel_id).kernel_spec.metadata or {})
        except Exception:  # noqa: BLE001 -- a kernel gone meanwhile, or its spec removed
            return {}

    @staticmethod
    def flavour(metadata: dict) -> str:
        """The ScaleLab flavour in a kernelspec's ``metadata``, ``""`` for another kernel."""
        return str((metadata.get("scalelab") or {}).get("flavour") or "")

    async def cull_kernel_if_idle(self, kernel_id: str) -> None:
        """Jupyter Server's rule (idle for ``cull_idle_timeout`` seconds, or the kernelspec's
        own ``metadata.cull_idle_timeout``), for a kernel of ``cull_flavours`` only; a culled
        kernel leaves a notice that says why and what to do."""
        metadata = self._metadata(kernel_id)
        flavour = self.flavour(metadata)
        kernel = self._kernels.get(kernel_id)
        dead = getattr(kernel, "execution_state", None) == "dead"  # cleared up, as upstream
        if flavour not in self.cull_flavours and not dead:
            return
        timeout = metadata.get("cull_idle_timeout", self.cull_idle_timeout)
        await super().cull_kernel_if_idle(kernel_id)
        notice_file = os.environ.get(envvars.NOTICE_FILE)  # set by the notices' setup
        if kernel_id not in self and notice_file and not dead:
            minutes = max(1, round(timeout / 60))
            write_notice(
                notice_file,
                f"Your {flavour} kernel was stopped after {minutes} minute(s) without activity, "
                "to give its Spark executors back to the course's cluster. Its variables are "
                "gone: run the notebook's cells again (Run > Run All Cells).",
            )
