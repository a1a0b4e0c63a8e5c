"""A real HTTP server (tornado, a subprocess on loopback) over a local folder, for fsspec's
``http`` file system: directory pages with links (for ``ls``), files with Range requests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

_SERVER = r"""
import asyncio, os, sys
import tornado.web

ROOT = sys.argv[1]


class Handler(tornado.web.StaticFileHandler):
    listing = False

    def compute_etag(self):
        return None if self.listing else super().compute_etag()

    async def get(self, path, include_body=True):
        full = os.path.join(ROOT, path)
        if os.path.isdir(full):
            self.listing = True
            for name in sorted(os.listdir(full)):
                slash = "/" if os.path.isdir(os.path.join(full, name)) else ""
                self.write(f'<a href="{name}{slash}">{name}</a>\n')
            return
        await super().get(path, include_body)


async def main():
    app = tornado.web.Application([(r"/(.*)", Handler, {"path": ROOT})])
    server = app.listen(0, "127.0.0.1")
    print(next(iter(server._sockets.values())).getsockname()[1], flush=True)
    await asyncio.Event().wait()


asyncio.run(main())
"""


@contextlib.contextmanager
def http_folder(root: Path) -> Iterator[str]:
    """Serve ``root`` over HTTP on loopback; yields the base URL ``http://127.0.0.1:PORT``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        if not line.isdigit():
            raise RuntimeError(f"the HTTP server did not start (exit status {proc.poll()})")
        yield f"http://127.0.0.1:{line}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
