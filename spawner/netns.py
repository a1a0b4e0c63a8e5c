"""A network namespace per local single-user server, joined to the host by a veth pair.

Each server's namespace (``ip netns``, named after its runtime folder) holds its loopback and
``eth0``, one end of a veth pair whose other end, ``slb<index>``, is on the host. The pair has
a /30 of its own out of the sandbox subnet (:func:`link_for`, pure): the host end's address and
the server's. The host reaches the server (the proxy and the hub, on the server's port); the
server reaches only the host's own addresses (forwarding is off on the host end, and the
namespace has no default route), and nothing of another server. Made with iproute2's ``ip``.
Why: docs/design-notes.md, scalelab.spawner.sandbox.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: Where ``ip netns`` keeps named network namespaces.
NETNS_DIR = Path("/run/netns")
#: Addresses per server: a /30 (network, host end, server, broadcast).
PAIR_PREFIX = 30
#: The host end's name, ``slb<index>`` (interface names have at most 15 characters).
HOST_IF = "slb{}"
#: The server's end's name while it is made, before it becomes ``eth0`` in the namespace.
PEER_IF = "sls{}"
#: Seconds an ``ip`` command may take.
IP_TIMEOUT_S = 30


class SandboxNetworkError(RuntimeError):
    """A server's network namespace cannot be made; the message names the command and why."""


@dataclass(frozen=True)
class SandboxLink:
    """One server's network namespace and its veth pair.

    Attributes
    ----------
    netns
        The namespace's ``ip netns`` name (the server's runtime folder's name).
    index
        The pair's place in the sandbox subnet (its /30 is the ``index``-th).
    host_if
        The host end's interface name.
    host_address, server_address
        The host end's and the server's (``eth0``'s) IPv4 addresses.
    """

    netns: str
    index: int
    host_if: str
    host_address: ipaddress.IPv4Address
    server_address: ipaddress.IPv4Address

    @property
    def path(self) -> str:
        """The namespace's file, for ``setns``."""
        return str(NETNS_DIR / self.netns)


def parse_subnet(text: str) -> ipaddress.IPv4Network:
    """The sandbox subnet ``text`` (e.g. ``10.249.0.0/16``) (pure).

    Raises
    ------
    ValueError
        Not an IPv4 network, or smaller than one /30.
    """
    subnet = ipaddress.IPv4Network(text)
    if subnet.prefixlen > PAIR_PREFIX:
        raise ValueError(f"{text} is smaller than one /{PAIR_PREFIX}")
    return subnet


def capacity(subnet: ipaddress.IPv4Network) -> int:
    """How many servers' /30s ``subnet`` holds (pure)."""
    return subnet.num_addresses // 4


def link_for(subnet: ipaddress.IPv4Network, index: int, netns: str) -> SandboxLink:
    """The namespace ``netns`` on the ``index``-th /30 of ``subnet`` (pure).

    Raises
    ------
    ValueError
        ``index`` is outside ``subnet``.
    """
    if not 0 <= index < capacity(subnet):
        raise ValueError(f"pair {index} is outside {subnet} ({capacity(subnet)} pairs)")
    base = subnet.network_address + 4 * index
    return SandboxLink(netns, index, HOST_IF.format(index), base + 1, base + 2)


def free_index(used: Iterable[int], size: int) -> int:
    """The lowest pair index in ``range(size)`` not in ``used`` (pure).

    Raises
    ------
    SandboxNetworkError
        Every pair is used.
    """
    taken = set(used)
    for index in range(size):
        if index not in taken:
            return index
    raise SandboxNetworkError(
        f"all {size} sandbox address pairs are in use. Ops: give c.ScaleLabSpawner."
        "sandbox_subnet a larger subnet."
    )


def indexes_in(addresses: Iterable[str], subnet: ipaddress.IPv4Network) -> set[int]:
    """The pair indexes of the host's ``addresses`` that lie in ``subnet`` (pure)."""
    found = set()
    for text in addresses:
        address = ipaddress.IPv4Address(text)
        if address in subnet:
            found.add((int(address) - int(subnet.network_address)) // 4)
    return found


def ip(*args: str) -> str:
    """Run ``ip <args>`` and return its output.

    Raises
    ------
    SandboxNetworkError
        ``ip`` is missing, failed or hung; the message holds the command and its error.
    """
    command = ["ip", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxNetworkError(f"{' '.join(command)}: {exc}") from None
    if done.returncode != 0:
        raise SandboxNetworkError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


def host_addresses() -> list[str]:
    """The host's IPv4 addresses (``ip -j -4 addr``).

    Raises
    ------
    SandboxNetworkError
        ``ip`` failed.
    """
    entries = json.loads(ip("-j", "-4", "addr", "show") or "[]")
    return [info["local"] for entry in entries for info in entry.get("addr_info", [])]


def create(link: SandboxLink) -> None:
    """Make ``link``'s namespace (loopback up) and veth pair, addressed, IPv6 off on both ends,
    forwarding off on the host end. What was made is removed again when a step fails.

    Raises
    ------
    SandboxNetworkError
        A step failed (e.g. not root, no veth support, the namespace exists).
    """
    peer = PEER_IF.format(link.index)
    server = f"{link.server_address}/{PAIR_PREFIX}"
    host = f"{link.host_address}/{PAIR_PREFIX}"
    try:
        ip("netns", "add", link.netns)
        ip("-n", link.netns, "link", "set", "lo", "up")
        ip("link", "add", link.host_if, "type", "veth", "peer", "name", peer, "netns", link.netns)
        ip("-n", link.netns, "link", "set", peer, "name", "eth0")
        for ns in ((), ("-n", link.netns)):
            name = "eth0" if ns else link.host_if
            ip(*ns, "link", "set", name, "addrgenmode", "none")  # no IPv6 link-local address
        _no_forwarding(link.host_if)
        ip("addr", "add", host, "dev", link.host_if)
        ip("-n", link.netns, "addr", "add", server, "dev", "eth0")
        ip("link", "set", link.host_if, "up")
        ip("-n", link.netns, "link", "set", "eth0", "up")
    except SandboxNetworkError:
        delete(link)
        raise


def _no_forwarding(interface: str) -> None:
    """Forward nothing the server sends (to other servers or beyond the host), whatever the
    host's ``ip_forward`` says."""
    path = Path("/proc/sys/net/ipv4/conf") / interface / "forwarding"
    try:
        path.write_text("0")
    except OSError as exc:
        raise SandboxNetworkError(f"cannot turn forwarding off in {path}: {exc}") from None


def delete(link: SandboxLink) -> None:
    """Remove ``link``'s veth pair and namespace; what is already gone is skipped."""
    if Path("/sys/class/net", link.host_if).exists():
        _quiet("link", "delete", link.host_if)
    if Path(link.path).exists():
        _quiet("netns", "delete", link.netns)


def _quiet(*args: str) -> None:
    try:
        ip(*args)
    except SandboxNetworkError:
        pass
