"""Server sandboxes' network namespaces, for tests' cleanup and checks (iproute2's ``ip``)."""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Iterable
from pathlib import Path


def netns_of(pids: Iterable[int]) -> set[str]:
    """The named network namespaces (``ip netns``) the processes ``pids`` are in."""
    names = set()
    for pid in pids:
        done = subprocess.run(
            ["ip", "netns", "identify", str(pid)], capture_output=True, text=True, check=False
        )
        names.update(done.stdout.split())
    return names


def remove(names: Iterable[str]) -> None:
    """Delete the namespaces ``names`` (their veth pairs go with them); gone ones are skipped."""
    for name in names:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)


def listening(pid: int) -> set[tuple[str, int]]:
    """``(address, port)`` of every TCP socket listening in the network namespace of ``pid``
    (its ``/proc/<pid>/net/tcp`` and ``tcp6``: the namespace's, not the reader's)."""
    found = set()
    for name in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            address, port = fields[1].split(":")
            found.add((_address(address), int(port, 16)))
    return found


def _address(hexed: str) -> str:
    """The address of ``/proc/net/tcp``'s hex form (32-bit words in host byte order)."""
    raw = bytes.fromhex(hexed)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))
