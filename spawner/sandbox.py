"""A sandbox per local single-user server: its own network namespace and temporary folders.

:class:`SandboxSpawnerMixin` gives each server started by root a network namespace
(:mod:`scalelab.spawner.netns`: reached by the proxy and the hub on the server's port, reaching
the host's hub API and the ports ops list through :mod:`scalelab.spawner.host_relay`, nothing
of another server) and a mount namespace in which /tmp, /var/tmp and /dev/shm are its own
(:mod:`scalelab.spawner.namespaces`). Both are entered in the server's ``preexec_fn``, as root,
before it becomes the student, so its kernels, JVMs and daemons are inside too. Why and what a
host needs: docs/design-notes.md, scalelab.spawner.sandbox; docs/operators-guide.md, Isolation.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from jupyterhub.spawner import LocalProcessSpawner, SpawnException
from traitlets import CaselessStrEnum, Int, List, TraitError, Unicode, validate

from scalelab.spawner import netns
from scalelab.spawner.host_relay import HostRelay
from scalelab.spawner.namespaces import (
    CLONE_NEWNET,
    enter_private_mounts,
    kept_mount_points,
    private_mounts,
    setns,
)
from scalelab.store.protocols import local_folder

#: The server's temporary folder inside its runtime folder (also ``TMPDIR``).
TMP = "tmp"

#: Pair indexes claimed by this hub process and not yet given back (a claim is made and its
#: addresses added under :data:`_CLAIM_LOCK`, so two starts never take the same pair).
_CLAIMED: set[int] = set()
_CLAIM_LOCK = threading.Lock()
#: The running relays of this hub process, by namespace name.
_RELAYS: dict[str, HostRelay] = {}


def install_folders() -> list[str]:
    """The folders of this ScaleLab the server runs from: the Python environment, its
    interpreter's real folder, and the folder holding ScaleLab's packages (an editable
    install's checkout: ``spawner/``, ``kernels/``, ``notebooks/`` ... side by side)."""
    return [
        sys.prefix,
        str(Path(sys.executable).resolve().parent),
        str(Path(__file__).resolve().parents[1]),
    ]


def missing_for_sandbox(*, root: bool, has_ip: bool, hub_api_url: str) -> str:
    """What this host lacks for a sandbox, or "" (pure): root, iproute2's ``ip``, and a hub
    API on the host's loopback (the relay carries loopback ports only)."""
    if not root:
        return "the hub does not run as root"
    if not has_ip:
        return "iproute2's `ip` is not installed"
    host = urlsplit(hub_api_url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return f"the hub's API ({hub_api_url}) is not on the host's loopback"
    return ""


def auto_off_reason(*, as_students: bool, store_url: str, spark_master: str) -> str:
    """Why ``sandbox = "auto"`` leaves a server without a sandbox on a host that can make one,
    or "" (pure): with one shared identity there is nothing between students to keep; a
    sandboxed server reaches only the host's loopback ports ops list
    (``sandbox_host_ports``), not a cluster, so the store and Spark must be local."""
    if not as_students:
        return "servers share one identity (no system users)"
    if local_folder(store_url) is None:
        return f"the course store ({store_url}) is not local"
    if not spark_master.startswith("local"):
        return f"Spark's master ({spark_master}) is a cluster"
    return ""


class SandboxSpawnerMixin(LocalProcessSpawner):
    """A network namespace and private temporary folders per server (local processes).

    The host class (:class:`~scalelab.spawner.local.ScaleLabSpawner`) has the course's
    settings (``store_url``, ``spark_master``, ``kernelspec_path``, ``server_log_dir``,
    ``home_root``, ``hadoop_conf_dir``), sets ``runtime_dir`` (the server's private runtime
    folder, with ``tmp/``) before :meth:`make_sandbox`, calls :meth:`sandbox_entry` in its
    ``preexec_fn`` and :meth:`end_sandbox` when the server stops or is found dead.
    """

    sandbox = CaselessStrEnum(
        ["auto", "on", "off"],
        default_value="auto",
        config=True,
        help="""Run each server in a sandbox: a network namespace of its own (reached by the
        proxy and the hub on the server's port only; reaching the hub's API and
        `sandbox_host_ports` on the host's loopback; nothing of another server: not its
        kernels' ports, Spark or UIs) and its own /tmp, /var/tmp and /dev/shm (emptied when
        it stops). `auto` (the default): on when the hub runs as root, servers run as the
        students' system users, `ip` (iproute2) is installed, and the store and Spark are
        local; else off, said once in the hub's log. `on`: a server that cannot get one is
        refused, with the reason. `off`: none. See docs/operators-guide.md, Isolation.""",
    )

    sandbox_subnet = Unicode(
        "10.249.0.0/16",
        config=True,
        help="""IPv4 subnet of the servers' sandbox links: each server takes a /30 of it (the
        host end's address and its own), so a /16 holds 16,384 servers. Pick one the host's
        networks do not use.""",
    )

    sandbox_host_ports = List(
        Int(),
        config=True,
        help="""Ports of the host's loopback (127.0.0.1) a sandboxed server may reach, besides
        the hub's API: e.g. a store or cluster service on the hub's own machine. Each is
        carried by the hub. Default: none.""",
    )

    #: This server's sandbox link while it has one (in the state).
    sandbox_link: netns.SandboxLink | None = None
    _sandbox_warned: bool = False
    _ip_before_sandbox: str | None = None
    #: The folders kept at their paths in this start's sandbox (see :meth:`_kept_folders`).
    _sandbox_kept: tuple[str, ...] = ()

    @validate("sandbox_subnet")
    def _valid_subnet(self, proposal):
        try:
            netns.parse_subnet(proposal["value"])
        except ValueError as exc:
            raise TraitError(f"c.{type(self).__name__}.sandbox_subnet: {exc}") from None
        return proposal["value"]

    def _sandbox_off_reason(self, wanted: str) -> str:
        missing = missing_for_sandbox(
            root=os.geteuid() == 0,
            has_ip=shutil.which("ip") is not None,
            hub_api_url=self.hub.api_url,
        )
        if missing or wanted != "auto":
            return missing
        return auto_off_reason(
            as_students=not self._as_hub_user,
            store_url=self.store_url,
            spark_master=self.spark_master,
        )

    async def make_sandbox(self) -> None:
        """Make this start's sandbox, named after its runtime folder, when ``sandbox`` says so;
        the server then listens on its sandbox address.

        Raises
        ------
        SpawnException
            ``sandbox = "on"`` and none can be made; the message says why and what to set.
        """
        wanted = self.sandbox.lower()
        if wanted == "off":
            return
        reason = self._sandbox_off_reason(wanted)
        if not reason:
            try:
                await self._make_link()
                return
            except (netns.SandboxNetworkError, OSError) as exc:
                reason = str(exc)
        if wanted == "on":
            raise SpawnException(
                f"Cannot give {self.user.name}'s server its sandbox: {reason}. Ops: see "
                "docs/operators-guide.md, Isolation, or set c.ScaleLabSpawner.sandbox = 'off'.",
                reason="sandbox",
                status_code=500,
            )
        if not self._sandbox_warned:
            self._sandbox_warned = True
            self.log.warning("Servers run without a sandbox (network, /tmp): %s", reason)

    async def _make_link(self) -> None:
        name = Path(self.runtime_dir).name
        subnet = netns.parse_subnet(self.sandbox_subnet)
        link = await asyncio.to_thread(claim_link, subnet, name)
        self.sandbox_link = link
        try:
            self._make_mount_points()
            await self._start_relay()
        except BaseException:
            self.end_sandbox()
            raise
        self._ip_before_sandbox = self.ip
        self.ip = str(link.server_address)

    def _kept_folders(self) -> list[str]:
        """The folders the server needs, kept at their paths inside its sandbox
        (:func:`~scalelab.spawner.namespaces.private_mounts`): ScaleLab's own
        (:func:`install_folders`; a checkout or environment under /tmp) and those the hub hands
        it."""
        store = local_folder(self.store_url)
        wanted = [
            *install_folders(),
            self.runtime_dir,
            *([str(store)] if store else []),
            *self.kernelspec_path,
            self.server_log_dir,
            self.home_root,
            self.hadoop_conf_dir,
        ]
        return [path for path in wanted if path and os.path.isdir(path)]

    def _make_mount_points(self) -> None:
        """Make the mount points of the kept folders inside the server's private /tmp, each
        folder on the way with the owner and mode of the host's folder it stands for: the
        student passes through them, or lists them, as far as on the host and no further."""
        private = Path(self.runtime_dir) / TMP
        self._sandbox_kept = tuple(self._kept_folders())  # their mount points are made now
        for path, point in kept_mount_points(str(private), self._sandbox_kept):
            host = Path(path).parents[len(Path(point).relative_to(private).parts) - 1]
            folder = private
            for part in Path(point).relative_to(private).parts:
                folder, host = folder / part, host / part
                if not folder.is_dir():
                    folder.mkdir()
                    mode = os.stat(host)
                    os.chown(folder, mode.st_uid, mode.st_gid)
                    folder.chmod(mode.st_mode & 0o7777)

    def _relay_ports(self) -> set[int]:
        hub_port = urlsplit(self.hub.api_url).port or 80
        return {hub_port, *self.sandbox_host_ports}

    async def _start_relay(self) -> None:
        link = self.sandbox_link
        relay = HostRelay(link.path, self._relay_ports(), self.log)
        await relay.start()
        _RELAYS[link.netns] = relay

    def sandbox_entry(self) -> Callable[[], None] | None:
        """What the server's ``preexec_fn`` calls, as root, to enter its sandbox (None without
        one): join the network namespace, then make the private mounts."""
        link = self.sandbox_link
        if link is None:
            return None
        ops = private_mounts(str(Path(self.runtime_dir) / TMP), self._sandbox_kept)

        def enter() -> None:
            try:
                setns(link.path, CLONE_NEWNET)
                enter_private_mounts(ops)
            except OSError as exc:  # the server's log (its stderr) says why it did not start
                os.write(2, f"ScaleLab: cannot enter the server's sandbox: {exc}\n".encode())
                raise

        return enter

    async def poll(self):
        status = await super().poll()
        link = self.sandbox_link
        running = _RELAYS.get(link.netns) if link else None
        if status is None and link and not (running and running.running):
            # A hub restarted while the server ran: its relays went with the old process.
            try:
                await self._start_relay()
            except OSError as exc:
                self.log.warning("%s: cannot carry the hub's port again: %s", link.netns, exc)
        return status

    def end_sandbox(self) -> None:
        """Stop the relay, remove the namespace and veth pair, and give the address back
        (nothing when the server has no sandbox). Called once its processes are gone."""
        link = self.sandbox_link
        if link is None:
            return
        relay = _RELAYS.pop(link.netns, None)
        if relay is not None:
            relay.close()
        release_link(link)
        self.sandbox_link = None
        if self._ip_before_sandbox is not None:
            self.ip, self._ip_before_sandbox = self._ip_before_sandbox, None

    def sandbox_state(self) -> dict:
        """The sandbox's part of the spawner's state."""
        link = self.sandbox_link
        return {"scalelab_sandbox": {"netns": link.netns, "index": link.index}} if link else {}

    def load_sandbox_state(self, state: dict) -> None:
        """Take the sandbox back from ``state`` (after a hub restart)."""
        saved = state.get("scalelab_sandbox")
        if not saved:
            self.sandbox_link = None
            return
        subnet = netns.parse_subnet(self.sandbox_subnet)
        self.sandbox_link = netns.link_for(subnet, int(saved["index"]), saved["netns"])
        with _CLAIM_LOCK:
            _CLAIMED.add(self.sandbox_link.index)


def claim_link(subnet, name: str) -> netns.SandboxLink:
    """Claim the lowest free pair of ``subnet`` (free on the host and in this process) and make
    the namespace ``name`` on it.

    Raises
    ------
    netns.SandboxNetworkError
        No pair is free, or a step of making it failed.
    """
    with _CLAIM_LOCK:
        used = netns.indexes_in(netns.host_addresses(), subnet) | _CLAIMED
        link = netns.link_for(subnet, netns.free_index(used, netns.capacity(subnet)), name)
        netns.create(link)
        _CLAIMED.add(link.index)
    return link


def release_link(link: netns.SandboxLink) -> None:
    """Remove ``link``'s namespace and veth pair and give its pair back (what is gone is
    skipped)."""
    netns.delete(link)
    with _CLAIM_LOCK:
        _CLAIMED.discard(link.index)
