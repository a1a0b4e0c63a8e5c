"""The kernels' Spark UI records and the page that opens the running kernel's Spark UI: pure
parts, the files they write, and the page on a real single-user server with real kernels
(tests/browser/test_browser_spark_ui.py opens it from JupyterLab's Course menu behind a real
hub).

The parts that need no running service: ``tests/unit/test_spark_ui_records.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scalelab.kernels.spark_ui_record import (
    SparkUIRecord,
    write_record,
)


def test_the_page_on_a_real_server_redirects_lists_or_says_none(tmp_path: Path):
    """A real single-user server with two running kernels (plain Python ones: the records are
    what a PySpark kernel writes) and UIs that listen on ports of the test's own."""
    import socket

    import requests

    from tests.integration.hub.test_full_disk import Server

    home, runtime = tmp_path / "home", tmp_path / "runtime"
    home.mkdir()
    runtime.mkdir(mode=0o700)
    server = Server(home, runtime_dir=runtime)
    uis = [socket.socket(), socket.socket()]
    try:
        kernels = []
        for path in ("one.ipynb", "two.ipynb"):
            body = {"path": path, "type": "notebook", "kernel": {"name": "python3"}}
            made = requests.post(
                f"{server.url}/api/sessions", json=body, headers=server.auth, timeout=60
            )
            assert made.status_code == 201, made.text
            kernels.append(made.json()["kernel"]["id"])
        ports = []
        for ui in uis:
            ui.bind(("127.0.0.1", 0))
            ui.listen()
            ports.append(ui.getsockname()[1])

        def page() -> requests.Response:
            return requests.get(
                f"{server.url}/scalelab/sparkui",
                headers=server.auth,
                allow_redirects=False,
                timeout=30,
            )

        assert "No kernel of yours runs Spark now" in page().text
        alive, dead = server.process.pid, 2**22 + 1  # above Linux's pid_max: no such process
        for kernel_id, port, started in zip(kernels, ports, (100.0, 200.0), strict=True):
            write_record(runtime, SparkUIRecord(kernel_id, port, "local-1", "app", alive, started))
        # Stale: the record of a kernel that was shut down.
        write_record(runtime, SparkUIRecord("gone", ports[0], "local-2", "stale", alive, 1.0))
        several = page()
        assert several.status_code == 200, several.text
        assert several.text.index("two.ipynb") < several.text.index("one.ipynb")  # newest first
        assert f'href="/sparkui/{ports[1]}/jobs/"' in several.text
        assert "stale" not in several.text

        # Kernel one restarted since its record (the same id, a new process): stale too.
        restarted = SparkUIRecord(kernels[0], ports[0], "local-3", "old", dead, 300.0)
        write_record(runtime, restarted)
        one = page()
        assert one.status_code == 302
        assert one.headers["Location"] == f"/sparkui/{ports[1]}/jobs/"

        # A port no kernel of this server recorded (another student's listener, on a host
        # without sandboxes): refused before any connection is made to it.
        foreign = socket.socket()
        foreign.bind(("127.0.0.1", 0))
        foreign.listen()
        foreign.setblocking(False)
        try:
            port = foreign.getsockname()[1]
            answer = requests.get(f"{server.url}/sparkui/{port}/", headers=server.auth, timeout=30)
            assert answer.status_code == 502, answer.text
            with pytest.raises(BlockingIOError):
                foreign.accept()  # nothing connected
        finally:
            foreign.close()

        uis[1].close()  # that UI is gone (its driver died under a running kernel)
        assert "No kernel of yours runs Spark now" in page().text
        # Its old link (a stale tab, a link in an old output): a page that says why and where
        # to go, not a bare 500 (a newcomer found that).
        stale = requests.get(
            f"{server.url}/sparkui/{ports[1]}/jobs/", headers=server.auth, timeout=30
        )
        assert stale.status_code == 502, stale.text
        assert "No Spark UI on this port" in stale.text
        assert f"No Spark UI runs on port {ports[1]} any more" in stale.text
        assert "Course &gt; Spark UI..." in stale.text or "Course > Spark UI..." in stale.text
    finally:
        for ui in uis:
            ui.close()
        server.stop()
