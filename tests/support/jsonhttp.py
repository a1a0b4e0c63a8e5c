"""A quiet ``http.server`` request handler that speaks JSON, for the fakes of REST services the
tests start (a Livy server, a Kubernetes API server)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler


class JSONHandler(BaseHTTPRequestHandler):
    """Subclass it with ``do_GET``/``do_POST``/...; ``reply`` answers JSON, ``json_body`` reads
    the request's."""

    def log_message(self, *_args: object) -> None:  # quiet
        pass

    def reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def json_body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
