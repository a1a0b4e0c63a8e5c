"""Free ports outside the ephemeral range (``scalelab.common.ports``): a CI run lost a test's
hub port, and a test server's port, to a Spark driver JVM's own ``bind(0)`` between the pick
and the bind."""

from __future__ import annotations

import socket

import pytest

from scalelab.common import ports
from scalelab.common.ports import ephemeral_range, free_port, pick_band


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("32768\t60999\n", (32768, 60999)),
        ("1024 65535", (1024, 65535)),
        (None, (32768, 60999)),  # the file could not be read
        ("", (32768, 60999)),
        ("60999 32768", (32768, 60999)),  # not a range
        ("32768", (32768, 60999)),
    ],
)
def test_the_ephemeral_range_is_read_from_the_kernels_file(text, expected):
    assert ephemeral_range(text) == expected


@pytest.mark.parametrize(
    ("ephemeral", "band"),
    [
        ((32768, 60999), range(20000, 32768)),  # Linux's default: the band below is larger
        ((20000, 50000), range(50001, 65536)),  # only above
        ((40000, 65535), range(20000, 40000)),  # only below
        ((1024, 65535), range(0)),  # no band: the OS picks
        ((10000, 19000), range(20000, 65536)),  # all of it lies below the lowest port picked
    ],
)
def test_the_band_is_the_larger_side_of_the_ephemeral_range(ephemeral, band):
    assert pick_band(ephemeral) == band


def test_a_free_port_is_outside_the_ephemeral_range_free_and_given_once():
    low, high = ephemeral_range(ports.EPHEMERAL_RANGE_FILE.read_text())
    picked = [free_port() for _ in range(200)]
    assert len(set(picked)) == 200  # never the same port twice in one process
    assert all(not low <= p <= high and p >= ports.LOWEST for p in picked), picked
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", picked[-1]))  # it is free: a server can bind it


def test_a_taken_port_is_not_given(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]
        choices = iter([taken, taken, free])
        monkeypatch.setattr(ports, "pick_band", lambda _ephemeral: range(1024, 65536))
        monkeypatch.setattr(ports._rng, "choice", lambda _band: next(choices))
        monkeypatch.setattr(ports, "_given", {})
        assert free_port() == free  # the taken port was tried twice and passed over


def test_where_no_band_is_left_the_os_picks(monkeypatch):
    monkeypatch.setattr(ports, "pick_band", lambda _ephemeral: range(0))
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert 0 < port <= 65535


def test_ipv6_hosts_get_an_ipv6_probe():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    try:
        port = free_port("::1")
    except OSError as exc:  # an IPv6-capable Python on a host without ::1
        pytest.skip(f"no ::1 here: {exc}")
    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::1", port))


def test_a_given_port_is_reserved_for_a_while_then_forgotten(monkeypatch):
    """A hub that runs for a term gives thousands of ports: it must not run out of them."""
    clock = [1000.0]
    monkeypatch.setattr(ports.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(ports, "_given", {})
    first = free_port()
    assert first in ports._given
    clock[0] += ports.RESERVED_S + 1
    free_port()
    assert first not in ports._given  # forgotten: its server has long bound it
