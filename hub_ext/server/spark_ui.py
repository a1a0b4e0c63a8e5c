"""The Spark UI of a student's drivers behind the hub: ``<base_url>sparkui/<port>/``.

:class:`SparkUIProxyHandler` is jupyter-server-proxy's ``LocalProxyHandler`` at that path, not
at ``proxy/<port>/``, where the Spark UI's scripts break; the kernel sets ``spark.ui.proxyBase``
to it, and redirects to other paths of the UI are put under it. It reaches only the UIs of its
own kernels (recorded, or a port a process of the server listens on), and never passes the
student's cookies or tokens on.
Why: docs/design-notes.md, scalelab.hub_ext.server.spark_ui.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psutil
from jupyter_server.utils import url_path_join
from jupyter_server_proxy.handlers import LocalProxyHandler
from tornado.web import HTTPError

from scalelab.common.processes import pid_runs
from scalelab.kernels.spark_ui_record import SparkUIRecord, live_records, read_records

#: The path segment of the Spark UI route, under the single-user server's base URL.
SPARK_UI_SEGMENT = "sparkui"


def gone_message(port: int) -> str:
    """What a student reads at ``sparkui/<port>/`` when nothing listens there any more (pure)."""
    return (
        f"No Spark UI runs on port {port} any more: its kernel was restarted or shut down, or "
        "spark.stop() ended its session. Open Course > Spark UI... in JupyterLab for the UI of "
        "the kernel running now (a PySpark notebook's next cell that uses spark starts one)."
    )


#: Request headers never sent to a Spark UI: the student's credentials for the hub and the
#: server (a UI, or whatever listens on a port, has no use for them and must not see them).
CREDENTIAL_HEADERS = ("Cookie", "Authorization", "X-XSRFToken")


def running_records(connection_dir: str, running_kernels: set[str]) -> list[SparkUIRecord]:
    """The Spark UI records of this server's running kernels, from its runtime folder
    (:mod:`scalelab.kernels.spark_ui_record`), newest first."""
    return live_records(read_records(connection_dir), running_kernels, pid_runs)


def own_ui_ports(connection_dir: str, running_kernels: set[str]) -> set[int]:
    """The ports of the Spark UIs of this server's running kernels (:func:`running_records`)."""
    return {record.port for record in running_records(connection_dir, running_kernels)}


def descendants_listening() -> set[int]:
    """The TCP ports a process this server started (a kernel, its Spark driver's JVM) listens
    on: a UI whose kernel has not written its record yet (it does after the cell that started
    Spark, which may still run a long job)."""
    ports = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            found = proc.net_connections(kind="tcp")
        except (psutil.Error, OSError):  # ended meanwhile
            continue
        ports |= {c.laddr.port for c in found if c.status == psutil.CONN_LISTEN}
    return ports


class SparkUIProxyHandler(LocalProxyHandler):
    """jupyter-server-proxy's local proxy at ``<base_url>sparkui/<port>/<path>``, for the Spark
    UIs of this server's own kernels only (recorded, or a port a process it started listens
    on). Any other port is a 502 page, as a port nobody listens on (a stale link after a kernel
    restart) is: a page saying so, not a bare 500. The student's cookies and tokens stay
    behind."""

    async def proxy(self, port: Any, proxied_path: str) -> Any:
        manager = self.kernel_manager
        running = set(manager.list_kernel_ids())
        owned = await asyncio.to_thread(own_ui_ports, manager.connection_dir, running)
        if int(port) not in owned:
            owned = await asyncio.to_thread(descendants_listening)
        if int(port) not in owned:
            raise HTTPError(502, "%s", gone_message(int(port)), reason="No Spark UI on this port")
        try:
            return await super().proxy(port, proxied_path)
        except ConnectionRefusedError:
            # 502 (the proxy's upstream is gone): jupyter_server's page for it shows the message
            # (its 404 page shows a fixed text).
            raise HTTPError(
                502, "%s", gone_message(int(port)), reason="No Spark UI on this port"
            ) from None

    def proxy_request_headers(self) -> Any:
        headers = super().proxy_request_headers()
        for name in CREDENTIAL_HEADERS:
            headers.pop(name, None)
        return headers

    def _get_context_path(self, host: str, port: int) -> str:
        # Where redirects (Location: /jobs/) are put back under: this route, not proxy/<port>.
        return url_path_join(self.base_url, SPARK_UI_SEGMENT, str(port))

    def _rewrite_location_header(self, location: str, host: str, port: int, path: str) -> str:
        # Spark already puts its redirects under spark.ui.proxyBase (spark.ui.proxyRedirectUri
        # = "/"); only a redirect outside this route is put under it.
        context = self._get_context_path(host, port)
        if location == context or location.startswith(context.rstrip("/") + "/"):
            return location
        return super()._rewrite_location_header(location, host, port, path)


def setup(serverapp: Any) -> None:
    """Add the ``sparkui/<port>/`` route to the single-user server's web application."""
    web_app = serverapp.web_app
    route = url_path_join(web_app.settings["base_url"], SPARK_UI_SEGMENT, r"(\d+)(/.*|)")
    web_app.add_handlers(".*", [(route, SparkUIProxyHandler, {"absolute_url": False})])
