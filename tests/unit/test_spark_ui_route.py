"""The Spark UI route of the single-user server (pure parts; the browser test
tests/browser/test_browser_spark_ui.py clicks through every page behind a real hub)."""

from __future__ import annotations

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
