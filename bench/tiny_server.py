"""A tiny stand-in for a single-user server, for bench/hub_load.py (stdlib only).

It listens where JupyterHub told it (``JUPYTERHUB_SERVICE_URL``) and answers every GET with
200: ``[]`` for ``.../api/kernels``, ``{}`` otherwise. Arguments are ignored.
"""

from __future__ import annotations

import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"[]" if self.path.split("?")[0].endswith("/api/kernels") else b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args) -> None:
        pass


def main() -> None:
    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    ThreadingHTTPServer((url.hostname or "127.0.0.1", url.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
