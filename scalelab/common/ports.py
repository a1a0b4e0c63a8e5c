"""Free TCP ports that no other program's ``bind(port 0)`` or outgoing connection can take.

A port the OS hands out for port 0 comes from the ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 on Linux by default). Once the probe
socket is closed, the next ``bind(0)`` or ``connect()`` of any process on the host (a Spark
driver's RPC port, a client's outgoing connection) may be handed the same port before the server
it was picked for binds it. :func:`free_port` picks below (or above) that range instead, where
only a program asking for that very port can take it.
"""

from __future__ import annotations

import random
import socket
import time
from pathlib import Path

#: Where Linux keeps the ephemeral range: two numbers, ``low high`` (inclusive).
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Linux's default ephemeral range, used where the file cannot be read.
DEFAULT_EPHEMERAL = (32768, 60999)
#: The lowest port picked: above the fixed ports a course host runs (Jupyter 8000/8888, Hadoop's
#: 8020-9870, Spark's 4040-7077, LDAP 389/636).
LOWEST = 20000
HIGHEST = 65535
#: Seconds a port given out stays reserved in this process: its server binds it well before,
#: and a long-running hub does not run out of ports to give.
RESERVED_S = 300.0

_rng = random.SystemRandom()
_given: dict[int, float] = {}  # port -> when it was given (time.monotonic())


def ephemeral_range(text: str | None) -> tuple[int, int]:
    """``(low, high)`` from ``ip_local_port_range``'s text; Linux's default when None or not two
    numbers (pure)."""
    try:
        low, high = (int(part) for part in (text or "").split())
    except ValueError:
        return DEFAULT_EPHEMERAL
    return (low, high) if low <= high else DEFAULT_EPHEMERAL


def pick_band(ephemeral: tuple[int, int]) -> range:
    """The larger of the bands in ``[LOWEST, HIGHEST]`` below and above the ephemeral range
    ``(low, high)``; empty when the range covers it all (pure)."""
    low, high = ephemeral
    below = range(LOWEST, max(LOWEST, low))
    above = range(max(LOWEST, high + 1), HIGHEST + 1)
    return max(below, above, key=len)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` (an IPv4 or IPv6 address; ``""`` for all) now, outside the
    OS's ephemeral range (see the module).

    A port is not returned twice in one process within :data:`RESERVED_S`, so two calls never
    give the same port to two servers that have not bound theirs yet. Where the ephemeral range
    leaves no band (or every try is taken), the OS picks one (port 0), as
    ``jupyterhub.utils.random_port`` does.
    """
    try:
        text = EPHEMERAL_RANGE_FILE.read_text()
    except OSError:
        text = None
    band = pick_band(ephemeral_range(text))
    now = time.monotonic()
    for port in [p for p, given in _given.items() if now - given > RESERVED_S]:
        del _given[port]
    for _ in range(64 if band else 0):
        port = _rng.choice(band)
        if port not in _given and _binds(host, port):
            _given[port] = now
            return port
    with socket.socket(_family(host)) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _binds(host: str, port: int) -> bool:
    with socket.socket(_family(host)) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could bind TCP ``port`` on ``host`` now (with ``SO_REUSEADDR``, as
    servers set it: a port whose last connection is in TIME_WAIT is free)."""
    with socket.socket(_family(host)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
