"""``ScaleLabSpawner``: course servers as local processes (over ``LocalProcessSpawner``).

A server runs as a system user per student (``system_users``), as the hub's own user with homes
under ``home_root`` (a single-user trial), or as the existing system user of the same name.
Everything else is the course layer's (:class:`~scalelab.spawner.course.CourseSpawnerMixin`).
Why: docs/design-notes.md, scalelab.spawner.local.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

from jupyterhub.spawner import LocalProcessSpawner, SpawnException
from traitlets import Bool, CaselessStrEnum, Int, Unicode, default

from scalelab import envvars
from scalelab.common.ports import free_port
from scalelab.common.processes import pid_runs
from scalelab.spawner import cgroups as server_cgroups
from scalelab.spawner.course import CourseSpawnerMixin
from scalelab.spawner.homes import make_home
from scalelab.spawner.sandbox import TMP, SandboxSpawnerMixin
from scalelab.spawner.server_logs import ServerLogMixin, server_log_path
from scalelab.spawner.start_queue import LOCAL_CONCURRENT_STARTS
from scalelab.spawner.start_watch import StartWatchMixin
from scalelab.spawner.system_users import (
    DEFAULT_PREFIX,
    ensure_system_user,
    private_folder,
    system_user_name,
)
from scalelab.store.protocols import local_folder

#: Characters of the user's (quoted) name in the runtime folder's name: the folder only needs
#: to be recognisable, and Unix socket paths under its ``tmp/`` (Python's multiprocessing's)
#: must stay within Linux's 107 characters.
NAME_CHARS = 20
#: The longest path of a Unix socket on Linux (``sun_path`` holds 108 bytes with its NUL).
UNIX_PATH_MAX = 107
#: What jupyter_client adds to the runtime folder for a kernel's ``ipc`` sockets:
#: ``/kernel-<uuid4>-ipc-<n>`` (``KernelManager._ip_default``, then ``-<port>``), n up to 5
#: digits.
IPC_SOCKET_SUFFIX = len("/kernel-") + 36 + len("-ipc-") + 5


def ipc_sockets_fit(runtime_dir: str) -> bool:
    """Whether kernels' ``ipc`` sockets in ``runtime_dir`` stay within :data:`UNIX_PATH_MAX`
    (pure)."""
    return len(os.fsencode(runtime_dir)) + IPC_SOCKET_SUFFIX <= UNIX_PATH_MAX


def root_servers_problem(
    *, hub_is_root: bool, home_root: str, system_users: bool, allowed: bool, where: str
) -> str:
    """Why a hub's configuration would run every server as root by accident, or "" (pure): run
    by root, with ``home_root`` set and ``system_users`` off, every server runs as the hub's
    own user, unless ``allow_root_servers`` says that is meant."""
    if not hub_is_root or not home_root or system_users or allowed:
        return ""
    return (
        f"{where}: every student's server would run as root (the hub runs as root, home_root is "
        f"set and system_users is off): set {where}.system_users = True for a system user per "
        f"student, or {where}.allow_root_servers = True to run them as root on purpose."
    )


def runtime_folder_prefix(user_name: str) -> str:
    """``scalelab-runtime-<name>-``, the name URL-quoted and cut to :data:`NAME_CHARS`
    characters (pure)."""
    return f"scalelab-runtime-{quote(user_name, safe='')[:NAME_CHARS]}-"


class ScaleLabSpawner(
    CourseSpawnerMixin, StartWatchMixin, ServerLogMixin, SandboxSpawnerMixin, LocalProcessSpawner
):
    """Spawner of ScaleLab's single-user servers as local processes.

    The course settings (store, Spark, kernels, Livy, GPUs) are
    :class:`~scalelab.spawner.course.CourseSpawnerMixin`'s, set as ``c.ScaleLabSpawner.*``;
    this class adds only what local processes need: who the server runs as (a system user per
    student, or the hub's own user with homes under ``home_root``), the hub's Python as the
    server's, ``--allow-root`` for a server run by root, the servers' log files, a start that
    fails at once with the reason when the server exits
    (:class:`~scalelab.spawner.start_watch.StartWatchMixin`), a Jupyter runtime folder
    outside the home, so that a server and its kernels start on a full home, kernels' channels
    as Unix sockets in it (``kernel_transport``), a cgroup per server
    (:mod:`scalelab.spawner.cgroups`: its limits, and nothing left when it stops) and a
    sandbox per server (:mod:`scalelab.spawner.sandbox`: its own network and /tmp).
    """

    system_users = Bool(
        False,
        config=True,
        help="""Make a system user per student on first start, `<system_user_prefix><name>`
        (no login shell, own group, home mode 0700), and run the server, its kernels and Spark
        as it. Needs a hub run by root and Debian's `useradd`. Students are then kept apart by
        the operating system: files, processes' environments (server tokens), the hub's
        secrets. `scalelab up` sets it when run by root, unless `--shared-identity` is given.
        Default: off.""",
    )

    system_user_prefix = Unicode(
        DEFAULT_PREFIX,
        config=True,
        help="""Prefix of the students' system users with `system_users` on: `jupyter-` (TLJH's)
        makes `jupyter-alice`. The whole name must have at most 32 characters.""",
    )

    allow_root_servers = Bool(
        False,
        config=True,
        help="""Let a hub run by root start servers as root: with `home_root` set and
        `system_users` off (every server runs as the hub's own user), or a login whose system
        user is root. Off (the default), such a hub refuses to start, and such a server to
        start, naming this setting and `system_users`. `scalelab up --shared-identity` run by
        root sets it (a single-user trial, said in its banner).""",
    )

    home_root = Unicode(
        "",
        config=True,
        help="""Folder that holds users' homes as `<home_root>/<username>`, created on first start.

        Empty (the default): use the system account's home and run the server as that user,
        as LocalProcessSpawner does. `scalelab up` sets `<state dir>/homes`, so no system accounts
        are needed. Example: `c.ScaleLabSpawner.home_root = "/srv/scalelab/homes"`.
        """,
    )

    runtime_parent = Unicode(
        "",
        config=True,
        help="""Folder in which each server start gets a fresh private Jupyter runtime folder
        (`JUPYTER_RUNTIME_DIR`: the server's info files and its kernels' connection files),
        `scalelab-runtime-<name>-<random>` (the name's first 20 characters), mode 0700 and
        the student's own, removed when the server stops. Its `tmp/` is the server's and its
        kernels' temporary folder (`TMPDIR`, `SPARK_LOCAL_DIRS`, the Spark driver's
        `java.io.tmpdir`), unless `environment` sets `TMPDIR`: nothing another student
        planted in /tmp is used, and what a killed kernel left there goes with the server.
        Outside the home, so that a server and its kernels start on a full home. Empty (the
        default): the system's temporary folder (`TMPDIR`, else /tmp).""",
    )

    cgroups = CaselessStrEnum(
        ["auto", "on", "off"],
        "auto",
        config=True,
        help="""Run each server in a Linux cgroup of its own (cgroup v2, or v1's memory, cpu and
        pids controllers), which holds the server, its kernels, their Spark drivers and
        everything they start: `mem_limit` (bytes of memory, swap included), `cpu_limit`
        (CPUs) and `tasks_limit` (processes and threads) bound them together, and when the
        server stops or dies whatever is still in it is killed (a process a kernel started in
        a session of its own too). `auto` (the default): on when the hub runs as root and the
        cgroup file system is writable, else off, with a warning in the hub's log (once per
        user's server); `on`: a server that cannot get one does not start, and says why;
        `off`: none.""",
    )

    cgroup_parent = Unicode(
        "scalelab",
        config=True,
        help="""Folder, under each cgroup hierarchy's root (/sys/fs/cgroup, or
        /sys/fs/cgroup/<controller> on cgroup v1), of the servers' cgroups: each server's is
        `<cgroup_parent>/<its runtime folder's name>`. On a systemd host (cgroup v2) give the
        hub's service `Delegate=yes` and point this into its own cgroup.""",
    )

    tasks_limit = Int(
        4096,
        min=0,
        config=True,
        help="""Processes and threads one server, its kernels and everything they start may
        have together (cgroup `pids.max`; 0: no limit). A Spark driver's JVM has 100 to 300
        threads, a PyTorch process about one per core; a fork bomb stops here. Used with
        `cgroups` on.""",
    )

    #: This server's Jupyter runtime folder while it runs (kept in the spawner's state).
    runtime_dir: str = ""
    #: This server's cgroup's name (under ``cgroup_parent``) while it has one (in the state).
    cgroup_name: str = ""
    #: Whether "auto" cgroups were found unusable (warned once per spawner).
    _cgroups_warned: bool = False

    @classmethod
    def check_host_settings(cls, settings: dict, where: str) -> None:
        """Refuse, before the hub starts, a hub run by root whose servers would all run as root
        (:func:`root_servers_problem`).

        Raises
        ------
        ValueError
            They would, and ``allow_root_servers`` is off; the message names both fixes.
        """
        problem = root_servers_problem(
            hub_is_root=os.geteuid() == 0,
            home_root=str(settings.get("home_root") or ""),
            system_users=bool(settings.get("system_users", False)),
            allowed=bool(settings.get("allow_root_servers", False)),
            where=where,
        )
        if problem:
            raise ValueError(problem)

    @default("concurrent_starts")
    def _default_concurrent_starts(self) -> int:
        return LOCAL_CONCURRENT_STARTS  # the servers start on this host (see its help)

    @default("cmd")
    def _default_cmd(self) -> list[str]:
        # The hub's own interpreter: the server gets ScaleLab's Python whatever PATH says.
        return [sys.executable, "-m", "jupyterhub.singleuser"]

    @property
    def system_user(self) -> str:
        """The system user the server runs as: ``<system_user_prefix><name>`` with
        ``system_users`` on, else the JupyterHub user's own name (unused when the server runs as
        the hub's user).

        Raises
        ------
        SpawnException
            The prefixed name is no valid system user name.
        """
        if self.system_users:
            return system_user_name(self.system_user_prefix, self.user.name)
        return self.user.name

    @property
    def _as_hub_user(self) -> bool:
        """Whether the server runs as the hub's own user (homes under home_root, no accounts)."""
        return bool(self.home_root) and not self.system_users

    @property
    def home_dir(self) -> str:
        """The user's home: under ``home_root`` when set, else the system account's home.

        Raises
        ------
        ValueError
            The user name does not make a folder directly under ``home_root``.
        KeyError
            ``home_root`` is empty and the system user does not exist.
        """
        if not self.home_root:
            return pwd.getpwnam(self.system_user).pw_dir
        root = Path(self.home_root).resolve()
        home = (root / self.user.name).resolve()
        if home.parent != root:
            raise ValueError(f"user name {self.user.name!r} does not make a home under {root}")
        return str(home)

    def make_preexec_fn(self, name):
        if not self._as_hub_user:
            # LocalProcessSpawner's: setgid, initgroups, setuid to the user, chdir to its home.
            as_user = super().make_preexec_fn(self.system_user)
        else:
            home = self.home_dir

            def as_user() -> None:
                os.makedirs(home, 0o700, exist_ok=True)
                os.chdir(home)

        steps = []  # each still as root: the cgroup's files and the namespaces are root's
        if self.cgroup_name:
            join = self._cgroup().join_paths()
            steps.append(lambda: server_cgroups.join(join))
        enter = self.sandbox_entry()
        if enter is not None:
            steps.append(enter)
        if not steps:
            return as_user

        def preexec() -> None:
            for step in steps:
                step()
            as_user()

        return preexec

    def user_env(self, env):
        if self.system_users:
            entry = pwd.getpwnam(self.system_user)
            env["USER"] = entry.pw_name
            env["HOME"] = entry.pw_dir
            env["SHELL"] = "/bin/bash"  # for JupyterLab's terminals; the login shell is nologin
            return env
        if not self.home_root:
            return super().user_env(env)
        env["USER"] = self.user.name
        env["HOME"] = self.home_dir
        env["SHELL"] = "/bin/bash"
        return env

    async def move_certs(self, paths):
        if not self._as_hub_user:
            return await super().move_certs(paths)
        return paths

    def get_env(self):
        env = super().get_env()
        if self.cgroup_name:  # the server tells its student of OOM kills there
            env[envvars.MEMORY_CGROUP] = str(self._cgroup().memory_path)
        if self.runtime_dir:
            env["JUPYTER_RUNTIME_DIR"] = self.runtime_dir
            if "TMPDIR" not in self.environment:  # ops' own choice wins
                env["TMPDIR"] = env["SPARK_LOCAL_DIRS"] = str(Path(self.runtime_dir) / TMP)
        if self.server_log_dir and self._as_hub_user and not self.name:
            # Servers run as the hub's user here: their live-log folder (the Spark drivers'
            # logs, which the student's log page reads) is the one ops read at the hub too.
            env[envvars.LOG_DIR] = str(server_log_path(self.server_log_dir, self.user.name).parent)
        return env

    def own_network(self) -> bool:
        """Whether this start has its sandbox (a network namespace of its own)."""
        return self.sandbox_link is not None

    def get_args(self):
        args = super().get_args()
        if self._as_hub_user and os.geteuid() == 0:
            # Servers run as the hub's own user in home_root mode; jupyter_server refuses root
            # unless told, and a hub run by root (a container, CI) is that case.
            args.append("--allow-root")
        return args

    async def start(self):
        self._refuse_root_server()
        if self.system_users:
            await asyncio.to_thread(self._make_system_user)
        elif self.home_root:
            make_home(self.home_root, self.user.name)
        await self.prepare_store_home()
        self.runtime_dir = str(await asyncio.to_thread(self._make_runtime_dir))
        if self.port == 0:  # JupyterHub's own pick (port 0) could race a kernel's JVM for it
            self.port = free_port(self.ip or "127.0.0.1")
        try:
            self._check_ipc_room()
            await asyncio.to_thread(self._make_cgroup)
            await self.make_sandbox()
            try:
                return await super().start()
            except subprocess.SubprocessError as exc:  # its preexec_fn failed
                raise SpawnException(
                    f"{self.user.name}'s server could not be started ({exc}); its log says "
                    "why. Ops: read it at /hub/scalelab/logs/" + quote(self.user.name, safe=""),
                    reason="preexec",
                    status_code=500,
                ) from None
        except BaseException:
            self._end_cgroup()
            self.end_sandbox()
            self._remove_runtime_dir()
            raise

    async def stop(self, now=False):
        await super().stop(now=now)
        await asyncio.to_thread(self._end_cgroup)  # what the server left running
        self.end_sandbox()  # the relay lives on the hub's event loop

    def get_state(self):
        state = super().get_state()
        if self.runtime_dir:
            state["scalelab_runtime_dir"] = self.runtime_dir
        if self.cgroup_name:
            state["scalelab_cgroup"] = self.cgroup_name
        state.update(self.sandbox_state())
        return state

    def load_state(self, state):
        super().load_state(state)
        self.runtime_dir = state.get("scalelab_runtime_dir", "")
        self.cgroup_name = state.get("scalelab_cgroup", "")
        self.load_sandbox_state(state)

    def clear_state(self):
        # JupyterHub clears a server's state when it stopped or died (without calling stop()
        # when it found the server dead), and before a new start.
        super().clear_state()
        self._end_cgroup()
        self.end_sandbox()
        self._remove_runtime_dir()

    def _refuse_root_server(self) -> None:
        """Refuse a server that would run as root unless ``allow_root_servers`` says so.

        Raises
        ------
        SpawnException
            It would (the hub's own user is root in ``home_root`` mode, or the login's system
            user is root); the message names the settings.
        """
        if self.allow_root_servers or os.geteuid() != 0 or self.system_users:
            return
        if self._as_hub_user:
            uid = 0
        else:
            try:
                uid = pwd.getpwnam(self.system_user).pw_uid
            except KeyError:
                return  # LocalProcessSpawner says the user is missing
        if uid == 0:
            raise SpawnException(
                f"{self.user.name}'s server would run as root. Ops: set "
                "c.ScaleLabSpawner.system_users = True for a system user per student, or "
                "c.ScaleLabSpawner.allow_root_servers = True to run servers as root on purpose.",
                reason="root",
                status_code=500,
            )

    def _check_ipc_room(self) -> None:
        """With ``kernel_transport = "ipc"``: refuse a runtime folder whose kernels' sockets
        would be longer than Linux allows (ZeroMQ would fail at the kernel's start instead).

        Raises
        ------
        SpawnException
            It would; the message names the folder and both ways out.
        """
        if self.kernel_transport.lower() == "ipc" and not ipc_sockets_fit(self.runtime_dir):
            raise SpawnException(
                f"The kernels' sockets in {self.runtime_dir} would be longer than Linux's "
                f"{UNIX_PATH_MAX} characters. Ops: set c.ScaleLabSpawner.runtime_parent to a "
                "shorter folder (e.g. /run/scalelab), or c.ScaleLabSpawner.kernel_transport = "
                "'tcp'.",
                reason="runtime_dir",
                status_code=500,
            )

    def _cgroup(self) -> server_cgroups.ServerCgroup:
        """This server's cgroup (``cgroup_name`` under ``cgroup_parent``).

        Raises
        ------
        server_cgroups.CgroupError
            The host has no usable cgroup hierarchy.
        """
        return server_cgroups.ServerCgroup(self.cgroup_parent, self.cgroup_name)

    def _make_cgroup(self) -> None:
        """Make this start's cgroup with the server's limits (see ``cgroups``), named after its
        runtime folder; with ``cgroups = "auto"`` and none possible, warn once and go on.

        Raises
        ------
        SpawnException
            ``cgroups = "on"`` and it cannot be made; the message says why.
        """
        wanted = self.cgroups.lower()
        if wanted == "off" or (wanted == "auto" and os.geteuid() != 0):
            return
        self.cgroup_name = Path(self.runtime_dir).name
        limits = server_cgroups.limits_of(self.mem_limit, self.cpu_limit, self.tasks_limit)
        group = None
        try:
            group = self._cgroup()
            group.create(limits)
            self._open_memory_counters(group)
        except server_cgroups.CgroupError as exc:
            if group is not None:
                group.end()  # what was made of it (a limit the kernel refused)
            self.cgroup_name = ""
            if wanted == "on":
                raise SpawnException(
                    f"Cannot give {self.user.name}'s server its cgroup: {exc}.",
                    reason="cgroup",
                    status_code=500,
                ) from None
            if not self._cgroups_warned:
                self._cgroups_warned = True
                self.log.warning("Servers run without a cgroup of their own (limits, end): %s", exc)

    def _open_memory_counters(self, group: server_cgroups.ServerCgroup) -> None:
        """Let the server's user read its memory cgroup's counters (its OOM kills, for the
        notice: :mod:`scalelab.hub_ext.server.oom_watch`): the folder becomes root's, group the
        student's, 0750 (the hub's umask made it 0700), and its parents passable (not listable:
        0711); its files are the kernel's, 0644.

        Raises
        ------
        CgroupError
            The folder's owner or mode cannot be set.
        """
        if self._as_hub_user:
            return  # the server runs as the hub's user, who made the folder
        try:
            gid = pwd.getpwnam(self.system_user).pw_gid
            os.chown(group.memory_path, 0, gid)
            group.memory_path.chmod(0o750)
            for parent in group.memory_path.parents:  # up to the hierarchy's root: passable
                if parent == group.root or parent.stat().st_mode & 0o111 == 0o111:
                    break
                parent.chmod(parent.stat().st_mode | 0o111)
        except (KeyError, OSError) as exc:
            raise server_cgroups.CgroupError(f"cannot open {group.memory_path}: {exc}") from None

    def _end_cgroup(self) -> None:
        """Kill what is left in this server's cgroup and remove it (nothing when it has none);
        pids that outlast :data:`server_cgroups.END_TIMEOUT_S` are logged and the cgroup kept."""
        if not self.cgroup_name:
            return
        try:
            left = self._cgroup().end()
        except server_cgroups.CgroupError as exc:
            self.log.warning("Cannot end %s's cgroup: %s", self._log_name, exc)
            return
        if left:
            self.log.warning(
                "%s: processes %s are still in cgroup %s after SIGKILL; kept for the next stop",
                self._log_name,
                sorted(left),
                self.cgroup_name,
            )
            return
        self.cgroup_name = ""

    async def _signal(self, sig):
        """JupyterHub's signal to the server's process, where a zombie counts as gone.

        A server started before the hub's restart is not the hub's child: when it dies, only
        its new parent (``scalelab up``, or PID 1) can reap it, and a PID 1 that never reaps
        (a container without an init) leaves a zombie. ``kill(pid, 0)`` still succeeds on a
        zombie, so JupyterHub's poll would call a dead server running and keep its GPUs.

        Returns True while the process exists and is not a zombie (JupyterHub's contract)."""
        if sig == 0 and self.pid and not pid_runs(self.pid):
            return False
        return await super()._signal(sig)

    def start_failure_home(self) -> str | None:
        try:
            return self.home_dir
        except (KeyError, ValueError):
            return None

    def _make_runtime_dir(self) -> Path:
        """A fresh runtime folder and its ``tmp/``, 0700, the server's user's own (see
        ``runtime_parent``).

        Raises
        ------
        SpawnException
            It cannot be made (any ``OSError``); the message names the folder.
        """
        parent = self.runtime_parent or tempfile.gettempdir()
        prefix = runtime_folder_prefix(self.user.name)
        try:
            folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))  # 0700, made anew
            (folder / TMP).mkdir(mode=0o700)
            if self.system_users:
                entry = pwd.getpwnam(self.system_user)
                for path in (folder, folder / TMP):
                    os.chown(path, entry.pw_uid, entry.pw_gid)
        except OSError as exc:
            raise SpawnException(
                f"Cannot make the Jupyter runtime folder for {self.user.name}'s server in "
                f"{parent}: {exc.strerror or exc}. Ops: check c.ScaleLabSpawner.runtime_parent.",
                reason="runtime_dir",
                status_code=500,
            ) from None
        return folder

    def _remove_runtime_dir(self) -> None:
        """Remove this server's runtime folder (its files are the dead server's and kernels')."""
        if self.runtime_dir:
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
            self.runtime_dir = ""

    def _make_system_user(self) -> None:
        """The student's system user, home and (in a local store) store folder, each 0700.

        Raises
        ------
        SpawnException
            Any of them cannot be made; one line names which and why.
        """
        home = self.home_dir if self.home_root else f"/home/{self.system_user}"
        entry = ensure_system_user(self.system_user, home)
        private_folder(entry.pw_dir, entry)
        store = local_store_root(self.store_url)
        if store is not None:
            private_folder(store / "home" / self.user.name, entry)


def local_store_root(store_url: str) -> Path | None:
    """The folder of a local course store (``file://`` URL or plain path), else None (pure)."""
    return local_folder(store_url)
