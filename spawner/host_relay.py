"""Ports of the host's loopback that a sandboxed server may reach: the hub's API, and the
ports ops list (``sandbox_host_ports``), each carried from the server's own ``127.0.0.1``.

A server in its own network namespace has a loopback of its own, so ``JUPYTERHUB_API_URL``
(``http://127.0.0.1:8081/...``) would reach nothing. :class:`HostRelay`, in the hub's process,
listens on those ports inside the namespace (:func:`~scalelab.spawner.namespaces.listen_in`)
and carries each connection to the same port of the host's loopback, as pasta's ``-T`` does
for rootless containers; every other host port stays out of reach. Why: docs/design-notes.md,
scalelab.spawner.sandbox.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from scalelab.spawner.namespaces import listen_in

#: Bytes read at a time while carrying a connection.
CHUNK = 64 * 1024
LOOPBACK = "127.0.0.1"


class HostRelay:
    """Carries connections to ``ports`` of a namespace's loopback to the host's.

    Parameters
    ----------
    netns_path
        The namespace's file (``/run/netns/<name>``).
    ports
        TCP ports; each listens on ``127.0.0.1`` inside the namespace.
    """

    def __init__(self, netns_path: str, ports: Iterable[int], log: logging.Logger):
        self.netns_path = netns_path
        self.ports = sorted(set(ports))
        self.log = log
        self._servers: list[asyncio.base_events.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        """Listen on every port inside the namespace.

        Raises
        ------
        OSError
            The namespace is gone, or a port is taken inside it.
        """
        try:
            for port in self.ports:
                sock = await asyncio.to_thread(listen_in, self.netns_path, LOOPBACK, port)
                server = await asyncio.start_server(self._carrier(port), sock=sock)
                self._servers.append(server)
        except BaseException:
            self.close()
            raise

    @property
    def running(self) -> bool:
        return bool(self._servers)

    def close(self) -> None:
        """Stop listening and cut the connections being carried (synchronous: JupyterHub's
        ``clear_state`` is)."""
        for server in self._servers:
            server.close()
        self._servers.clear()
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    def _carrier(self, port: int):
        async def carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                host_reader, host_writer = await asyncio.open_connection(LOOPBACK, port)
            except OSError as exc:
                self.log.debug("Sandbox %s: host port %s: %s", self.netns_path, port, exc)
                writer.close()
                return
            pair = {writer, host_writer}
            self._writers |= pair
            try:
                await asyncio.gather(_pipe(reader, host_writer), _pipe(host_reader, writer))
            finally:
                self._writers -= pair
                for each in pair:
                    each.close()

        return carry


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until end of stream, then half-close ``writer``."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()
