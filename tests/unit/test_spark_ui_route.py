"""The Spark UI route of the single-user server (pure parts; the browser test
tests/browser/test_browser_spark_ui.py clicks through every page behind a real hub)."""

from __future__ import annotations

import os
from types import SimpleNamespace

from scalelab.hub_ext.server.spark_ui import SparkUIProxyHandler


def _handler(base_url: str = "/user/alice/") -> SparkUIProxyHandler:
    handler = SparkUIProxyHandler.__new__(SparkUIProxyHandler)  # no request: the pure methods
    handler.application = SimpleNamespace(settings={"base_url": base_url})
    handler.proxy_base = ""
    handler.absolute_url = False
    return handler


def test_redirects_are_put_under_the_spark_ui_route_once():
    handler = _handler()
    assert handler._get_context_path("localhost", 4041) == "/user/alice/sparkui/4041"
    # Spark put it under spark.ui.proxyBase already (spark.ui.proxyRedirectUri = "/").
    done = "/user/alice/sparkui/4041/jobs/"
    assert handler._rewrite_location_header(done, "localhost", 4041, "") == done
    # A path of the UI's own: under the route (not jupyter-server-proxy's proxy/<port>).
    assert (
        handler._rewrite_location_header("/jobs/", "localhost", 4041, "")
        == "/user/alice/sparkui/4041/jobs/"
    )
    # Another host's address is left alone, as jupyter-server-proxy does.
    elsewhere = "http://example.org/x"
    assert handler._rewrite_location_header(elsewhere, "localhost", 4041, "") == elsewhere


def test_the_students_credentials_never_reach_a_spark_ui():
    from tornado.httputil import HTTPHeaders

    handler = _handler()
    headers = HTTPHeaders(
        {
            "Cookie": "jupyterhub-user-alice=secret; _xsrf=x",
            "Authorization": "token alice-server-token",
            "X-XSRFToken": "x",
            "Accept": "text/html",
        }
    )
    handler.request = SimpleNamespace(headers=headers)
    sent = handler.proxy_request_headers()
    assert dict(sent) == {"Accept": "text/html"}
    assert "Cookie" in handler.request.headers  # the server's own request is left as it was


def test_only_the_uis_its_own_running_kernels_recorded_are_reachable(tmp_path):
    from scalelab.hub_ext.server.spark_ui import own_ui_ports
    from scalelab.kernels.spark_ui_record import SparkUIRecord, write_record

    alive, dead = os.getpid(), 2**22 + 1  # above Linux's pid_max: no such process
    write_record(tmp_path, SparkUIRecord("k1", 4040, "local-1", "app", alive, 1.0))
    write_record(tmp_path, SparkUIRecord("k2", 4041, "local-2", "app", dead, 2.0))  # restarted
    write_record(tmp_path, SparkUIRecord("k3", 4042, "local-3", "app", alive, 3.0))  # shut down
    assert own_ui_ports(str(tmp_path), {"k1", "k2"}) == {4040}
    assert own_ui_ports(str(tmp_path / "missing"), {"k1"}) == set()


def test_a_ui_not_recorded_yet_is_found_among_the_servers_own_processes():
    import subprocess
    import sys
    import time

    from scalelab.hub_ext.server.spark_ui import descendants_listening

    code = (
        "import socket, sys, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        deadline = time.monotonic() + 10
        while port not in descendants_listening() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert port in descendants_listening()  # a child of this process listens there
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
