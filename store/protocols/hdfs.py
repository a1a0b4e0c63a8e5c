"""A course store in HDFS: ``hdfs://`` (hdfs-native, else pyarrow's libhdfs) and ``webhdfs://``.

The protocols; the Hadoop client's configuration, HA, Kerberos and the choice of client are
:mod:`scalelab.store.access.hdfs`'s, imported when a store of these protocols is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import fsspec

from scalelab.store.protocols.base import StoreProtocol


class _HadoopProtocol(StoreProtocol):
    """What both ways into HDFS share: the namenode renames a folder at once, an unreachable
    namenode is named with its address, a missing ticket and HDFS's own refusals are one line."""

    setting_hint = "the namenode in c.ScaleLabSpawner.store_url, or HADOOP_CONF_DIR"
    atomic_rename = True
    hadoop = True

    def unreachable_message(
        self, url: str, exc: BaseException, environ: Mapping[str, str]
    ) -> str | None:
        from scalelab.store.access.hdfs import namenode_unreachable

        return namenode_unreachable(url, exc, environ)

    def failure(self, url: str, exc: BaseException) -> Exception | None:
        from scalelab.store.access.hdfs import hdfs_failure

        return hdfs_failure(url, exc)


class HDFSProtocol(_HadoopProtocol):
    """``hdfs://``: the namenode's RPC, through ``HADOOP_CONF_DIR`` (HA nameservices, Kerberos)."""

    schemes = ("hdfs",)
    fs_protocols = frozenset({"hdfs", "arrow_hdfs", "viewfs"})
    package = "hdfs-native"

    def open(self, url: str, options: dict[str, Any]) -> tuple[fsspec.AbstractFileSystem, str]:
        from scalelab.store.access.hdfs import open_hdfs

        return open_hdfs(url, options)

    def check_environment(
        self, url: str, options: Mapping[str, Any], environ: Mapping[str, str]
    ) -> None:
        """Hadoop's configuration readable, a Kerberos ticket where the cluster requires one, and
        an HDFS client installed."""
        import os

        from scalelab.store.access.hdfs import check_kerberos, choose_client, read_hadoop_conf

        conf = read_hadoop_conf(environ.get("HADOOP_CONF_DIR"))
        check_kerberos(conf, environ, os.getuid())
        choose_client(environ)

    def probe_addresses(
        self, url: str, options: Mapping[str, Any], environ: Mapping[str, str]
    ) -> list[tuple[str, int]]:
        """The namenodes (an HA nameservice's all), as ``HADOOP_CONF_DIR`` resolves the URL.

        Raises ``StoreConfigError`` for a URL the configuration cannot resolve."""
        from scalelab.store.access.hdfs import read_hadoop_conf, resolve_hdfs

        conf = read_hadoop_conf(environ.get("HADOOP_CONF_DIR"))
        return list(resolve_hdfs(url, conf).namenodes)


class WebHDFSProtocol(_HadoopProtocol):
    """``webhdfs://``: the namenode's HTTP API (fsspec's ``WebHDFS``; no JVM, no native client)."""

    schemes = ("webhdfs",)
    fs_protocols = frozenset({"webhdfs"})
    package = "fsspec"

    def open(self, url: str, options: dict[str, Any]) -> tuple[fsspec.AbstractFileSystem, str]:
        """fsspec's ``WebHDFS`` with ScaleLab's fixes (:mod:`scalelab.store.access.hdfs_fixes`)."""
        from scalelab.store.access.hdfs_fixes import WebHDFSStore

        kwargs = {**WebHDFSStore._get_kwargs_from_urls(url), **options}
        return WebHDFSStore(**kwargs), WebHDFSStore._strip_protocol(url)

    def probe_addresses(
        self, url: str, options: Mapping[str, Any], environ: Mapping[str, str]
    ) -> list[tuple[str, int]]:
        """The URL's host and port (9870, Hadoop 3's namenode HTTP port, by default)."""
        parts = urlsplit(url)
        return [(parts.hostname or "localhost", parts.port or 9870)]
