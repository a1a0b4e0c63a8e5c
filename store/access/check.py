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
from urllib.parse import urlsplit

import fsspec

from scalelab.store.access.student import setting_hint
from scalelab.store.errors import StoreConfigError, StoreUnavailableError

#: Seconds to wait for a TCP connection to a namenode or endpoint.
PROBE_TIMEOUT_S = 2.0
#: pip packages of fsspec protocols whose package is not fsspec itself.
PROTOCOL_PACKAGES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gcs": "gcsfs",
    "gs": "gcsfs",
    "hdfs": "hdfs-native",
}


def probe_addresses(
    url: str, storage_options: Mapping[str, Any], environ: Mapping[str, str]
) -> list[tuple[str, int]]:
    """The ``(host, port)`` servers the store at ``url`` needs, of which one must answer (pure
    apart from reading ``HADOOP_CONF_DIR``).

    HDFS: its namenodes (HA resolved); WebHDFS: the URL's host and port (9870 by default); S3
    with an ``endpoint_url`` (in ``storage_options`` or ``client_kwargs``): that endpoint; local
    folders and public clouds: none.

    Raises
    ------
    StoreConfigError
        An HDFS URL that cannot be resolved (see :func:`scalelab.store.access.hdfs.resolve_hdfs`).
    """
    protocol = fsspec.core.split_protocol(url)[0] or "file"
    if protocol == "hdfs":
        from scalelab.store.access.hdfs import read_hadoop_conf, resolve_hdfs

        conf = read_hadoop_conf(environ.get("HADOOP_CONF_DIR"))
        return list(resolve_hdfs(url, conf).namenodes)
    if protocol == "webhdfs":
        parts = urlsplit(url)
        return [(parts.hostname or "localhost", parts.port or 9870)]
    if protocol in ("s3", "s3a"):
        endpoint = storage_options.get("endpoint_url") or (
            storage_options.get("client_kwargs") or {}
        ).get("endpoint_url")
        if endpoint:
            parts = urlsplit(endpoint)
            default = 443 if parts.scheme == "https" else 80
            return [(parts.hostname or "", parts.port or default)]
    return []


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
        None of the store's servers (namenodes, endpoint) accepts a connection.
    """
    env = os.environ if environ is None else environ
    protocol = fsspec.core.split_protocol(url)[0] or "file"
    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise StoreConfigError(
            f"the store URL {url!r} names the protocol {protocol!r}, which fsspec does not know: "
            "fix c.ScaleLabSpawner.store_url (file://, hdfs://, webhdfs://, s3:// ...)."
        ) from None
    except ImportError:
        package = PROTOCOL_PACKAGES.get(protocol, f"the fsspec back end of {protocol}://")
        raise StoreConfigError(
            f"the store URL {url!r} needs {package}, which is not installed in this kernel's "
            f"environment: pip install {package}, or change c.ScaleLabSpawner.store_url."
        ) from None
    if protocol == "hdfs":
        from scalelab.store.access.hdfs import check_kerberos, choose_client, read_hadoop_conf

        conf = read_hadoop_conf(env.get("HADOOP_CONF_DIR"))
        check_kerberos(conf, env, os.getuid())
        choose_client(env)
    addresses = probe_addresses(url, storage_options, env)
    if addresses and not any(reachable(host, port) for host, port in addresses):
        servers = ", ".join(f"{h}:{p}" for h, p in addresses)
        raise StoreUnavailableError(
            f"the course store {url} cannot be reached: nothing answers at {servers}. "
            f"Check {setting_hint(url)}, and that the server is up."
        )
