"""The cheap up-front check of the course store's configuration, run when a kernel starts.

It catches, in well under a second and without touching data: an unknown protocol or one whose
package is missing, bad Hadoop configuration, a missing Kerberos ticket or HDFS client, and a
namenode or S3 endpoint that refuses connections. What it cannot see (wrong credentials, a
missing bucket) surfaces at first use as a :class:`~scalelab.store.errors.StoreError`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

import fsspec

from scalelab.store import protocols
from scalelab.store.errors import StoreConfigError, StoreUnavailableError

#: Seconds to wait for a TCP connection to a namenode or endpoint.
PROBE_TIMEOUT_S = 2.0


def tcp_reachable(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to ``host:port`` opens within ``timeout_s`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def check_store(
    url: str,
    storage_options: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    reachable: Callable[[str, int], bool] = tcp_reachable,
) -> None:
    """Check the store configuration up front; return None when nothing is wrong.

    Raises
    ------
    StoreConfigError
        The protocol is unknown or its package is not installed; HDFS configuration, Kerberos
        ticket or client missing. The message names the setting to fix.
    StoreUnavailableError
        None of the store's servers (its protocol's ``probe_addresses``: namenodes, an S3
        endpoint) accepts a connection.
    """
    env = os.environ if environ is None else environ
    kind, protocol = protocols.for_url(url), protocols.scheme_of(url)
    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise StoreConfigError(
            f"the store URL {url!r} names the protocol {protocol!r}, which fsspec does not know: "
            "fix c.ScaleLabSpawner.store_url (file://, hdfs://, webhdfs://, s3:// ...)."
        ) from None
    except ImportError:
        raise StoreConfigError(
            f"the store URL {url!r} needs {kind.package}, which is not installed in this "
            f"kernel's environment: pip install {kind.package}, or change "
            "c.ScaleLabSpawner.store_url."
        ) from None
    kind.check_environment(url, storage_options, env)
    addresses = kind.probe_addresses(url, storage_options, env)
    if addresses and not any(reachable(host, port) for host, port in addresses):
        servers = ", ".join(f"{h}:{p}" for h, p in addresses)
        raise StoreUnavailableError(
            f"the course store {url} cannot be reached: nothing answers at {servers}. "
            f"Check {kind.setting_hint}, and that the server is up."
        )
