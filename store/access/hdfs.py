"""HDFS stores: Hadoop configuration, HA nameservices, Kerberos, and which client to use.

Resolution is pure; only :func:`read_hadoop_conf` reads files and :func:`open_hdfs` opens a
client: hdfs-native (JVM-free, fsspec's ``hdfs``) first, else pyarrow's ``HadoopFileSystem``
(fsspec ``arrow_hdfs``, with libhdfs and a JVM).
"""

from __future__ import annotations

import importlib.util
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scalelab.store.access.kerberos import (
    MIT_DEFAULT_CACHE,
    KerberosLogin,
    missing_ticket_error,
    ticket_failure,
)
from scalelab.store.errors import StoreConfigError

#: Port of a namenode's RPC service when neither the URL nor the configuration gives one.
DEFAULT_NAMENODE_PORT = 8020
#: The Hadoop configuration files read from ``HADOOP_CONF_DIR``, later ones winning.
CONF_FILES = ("core-site.xml", "hdfs-site.xml")
#: hdfs-native's retries of a namenode that refuses the connection (stopped, or its host up and
#: the process gone), when neither ``storage_options`` nor ``HADOOP_CONF_DIR`` sets
#: ``dfs.client.failover.max.attempts``: hdfs-native's own default, 15, sleeps between attempts
#: (0.5 s doubled each time, up to ``dfs.client.failover.sleep.max.millis`` = 15 s) for about 3
#: minutes on a single namenode (``bench/hdfs_dead_namenode.py``: 183 s on a stopped test
#: namenode); 1 gives up after one retry (0.7 to 1.4 s there). Ops who would rather wait
#: through a namenode restart raise it, in ``c.ScaleLabSpawner.store_options`` or
#: ``hdfs-site.xml``; each further attempt adds up to 15 s. hdfs-native has no connect
#: time-out for namenodes: a host that drops the packets (no refusal) waits for the system's TCP
#: connect time-out (about 2 minutes on Linux).
FAILOVER_ATTEMPTS_KEY = "dfs.client.failover.max.attempts"
FAILOVER_ATTEMPTS = "1"


@dataclass(frozen=True)
class HdfsTarget:
    """Where an ``hdfs://`` URL points.

    Attributes
    ----------
    namenodes
        ``(host, port)`` of each namenode to try, in configuration order (two or more for HA).
    nameservice
        The HA nameservice the URL names, or None for a plain ``host:port``.
    path
        The path in HDFS, starting with ``/``.
    """

    namenodes: tuple[tuple[str, int], ...]
    nameservice: str | None
    path: str


def read_hadoop_conf(
    conf_dir: str | os.PathLike[str] | None, files: Sequence[str] = CONF_FILES
) -> dict[str, str]:
    """The properties of ``files`` (``core-site.xml`` and ``hdfs-site.xml``) in ``conf_dir``.

    Parameters
    ----------
    conf_dir
        ``HADOOP_CONF_DIR``; None or a folder without the files gives ``{}``.
    files
        The files' names, later ones winning (``yarn-site.xml`` for YARN's settings).

    Raises
    ------
    StoreConfigError
        A file is not well-formed XML (the message names the file).
    """
    conf: dict[str, str] = {}
    if not conf_dir:
        return conf
    for name in files:
        path = Path(conf_dir) / name
        if not path.is_file():
            continue
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as exc:
            raise StoreConfigError(
                f"{path} is not valid XML ({exc}); fix it or point HADOOP_CONF_DIR elsewhere."
            ) from None
        for prop in root.iter("property"):
            key = (prop.findtext("name") or "").strip()
            if key:
                conf[key] = (prop.findtext("value") or "").strip()
    return conf


def _host_port(address: str, setting: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    if not host:
        return address.strip(), DEFAULT_NAMENODE_PORT
    try:
        return host, int(port)
    except ValueError:
        raise StoreConfigError(
            f"{setting} = {address!r} is not host:port; fix it in HADOOP_CONF_DIR/hdfs-site.xml."
        ) from None


def resolve_hdfs(url: str, conf: Mapping[str, str]) -> HdfsTarget:
    """Resolve an ``hdfs://`` store URL against the Hadoop configuration (pure).

    ``hdfs://host:port/path`` names one namenode; ``hdfs://ns/path``, where ``ns`` is in
    ``dfs.nameservices``, the namenodes of ``dfs.ha.namenodes.ns`` (each
    ``dfs.namenode.rpc-address.ns.<id>``); ``hdfs:///path`` the file system ``fs.defaultFS``.

    Raises
    ------
    StoreConfigError
        Not an ``hdfs://`` URL; no namenode in it nor ``fs.defaultFS``; an HA nameservice
        whose namenodes or addresses are missing (the property is named).
    """
    parts = urlsplit(url)
    if parts.scheme != "hdfs":
        raise StoreConfigError(f"{url!r} is not an hdfs:// URL (c.ScaleLabSpawner.store_url).")
    path = parts.path or "/"
    if not parts.netloc:
        default = conf.get("fs.defaultFS", "")
        if not default.startswith("hdfs://") or not urlsplit(default).netloc:
            raise StoreConfigError(
                f"the store URL {url!r} names no namenode and HADOOP_CONF_DIR's core-site.xml "
                "sets no hdfs:// fs.defaultFS: write the namenode into "
                "c.ScaleLabSpawner.store_url (hdfs://namenode:8020/course) or set "
                "HADOOP_CONF_DIR."
            )
        return resolve_hdfs(f"hdfs://{urlsplit(default).netloc}{path}", conf)
    host = parts.hostname or ""
    nameservices = [n.strip() for n in conf.get("dfs.nameservices", "").split(",") if n.strip()]
    if parts.port is None and host in nameservices:
        ids_key = f"dfs.ha.namenodes.{host}"
        ids = [i.strip() for i in conf.get(ids_key, "").split(",") if i.strip()]
        if not ids:
            single = f"dfs.namenode.rpc-address.{host}"
            if single in conf:
                return HdfsTarget((_host_port(conf[single], single),), host, path)
            raise StoreConfigError(
                f"nameservice {host!r} (dfs.nameservices) has no namenodes: set {ids_key} in "
                "HADOOP_CONF_DIR/hdfs-site.xml."
            )
        namenodes = []
        for nn in ids:
            key = f"dfs.namenode.rpc-address.{host}.{nn}"
            if key not in conf:
                raise StoreConfigError(
                    f"namenode {nn!r} of nameservice {host!r} has no address: set {key} in "
                    "HADOOP_CONF_DIR/hdfs-site.xml."
                )
            namenodes.append(_host_port(conf[key], key))
        return HdfsTarget(tuple(namenodes), host, path)
    return HdfsTarget(((host, parts.port or DEFAULT_NAMENODE_PORT),), None, path)


def kerberos_required(conf: Mapping[str, str]) -> bool:
    """Whether the cluster uses Kerberos (``hadoop.security.authentication = kerberos``)."""
    return conf.get("hadoop.security.authentication", "simple").strip().lower() == "kerberos"


def ticket_cache(environ: Mapping[str, str], uid: int) -> str | None:
    """The file of the Kerberos ticket cache, or None where it is not a file (KEYRING:, KCM:).

    ``KRB5CCNAME`` as ``FILE:<file>`` or ``<file>``; unset: :data:`MIT_DEFAULT_CACHE`.
    """
    name = environ.get("KRB5CCNAME", "").strip()
    if not name:
        return MIT_DEFAULT_CACHE.format(uid=uid)
    if name.startswith("FILE:"):
        return name[len("FILE:") :]
    if ":" in name.split("/", 1)[0]:
        return None  # a cache type we cannot look into (KEYRING:, KCM:, DIR:, MEMORY:)
    return name


def check_kerberos(
    conf: Mapping[str, str],
    environ: Mapping[str, str],
    uid: int,
    exists: Callable[[str], bool] = os.path.exists,
) -> None:
    """Refuse a Kerberos cluster without a ticket cache, naming ``kinit`` with the principal and
    keytab (``SCALELAB_KERBEROS_PRINCIPAL``, ``SCALELAB_KERBEROS_KEYTAB``) and ``KRB5CCNAME``.

    Raises
    ------
    KerberosTicketError (a StoreConfigError)
        Kerberos is required and the ticket cache file does not exist.
    """
    if not kerberos_required(conf):
        return
    cache = ticket_cache(environ, uid)
    if cache is not None and not exists(cache):
        raise missing_ticket_error(KerberosLogin.from_environ(environ, uid))


def libhdfs_dir(environ: Mapping[str, str], exists: Callable[[str], bool] = os.path.exists):
    """The folder holding ``libhdfs.so`` for pyarrow, or None (``ARROW_LIBHDFS_DIR``, then
    ``HADOOP_HOME/lib/native``)."""
    candidates = [environ.get("ARROW_LIBHDFS_DIR", "")]
    if environ.get("HADOOP_HOME"):
        candidates.append(os.path.join(environ["HADOOP_HOME"], "lib", "native"))
    for folder in candidates:
        if folder and exists(os.path.join(folder, "libhdfs.so")):
            return folder
    return None


def choose_client(
    environ: Mapping[str, str],
    has_module: Callable[[str], bool] = lambda m: importlib.util.find_spec(m) is not None,
    exists: Callable[[str], bool] = os.path.exists,
) -> str:
    """``"hdfs-native"`` when installed, else ``"pyarrow"`` when libhdfs and its JVM are found.

    Raises
    ------
    StoreConfigError
        Neither: the message names both fixes (``pip install hdfs-native``, ``ARROW_LIBHDFS_DIR``);
        or libhdfs without what it needs to start a JVM (``JAVA_HOME``, Hadoop's jars on
        ``CLASSPATH``): checked here because a JVM that fails inside libhdfs can take the
        kernel with it.
    """
    if has_module("hdfs_native"):
        return "hdfs-native"
    if libhdfs_dir(environ, exists) is not None:
        java_home = environ.get("JAVA_HOME", "")
        if not java_home or not exists(java_home):
            raise StoreConfigError(
                "pyarrow's HDFS client (libhdfs) needs a JVM: set JAVA_HOME to a Java install "
                f"(now {java_home or 'unset'}), or pip install hdfs-native, which needs none."
            )
        hadoop = os.path.join(environ.get("HADOOP_HOME", ""), "bin", "hadoop")
        if not environ.get("CLASSPATH") and not (environ.get("HADOOP_HOME") and exists(hadoop)):
            raise StoreConfigError(
                "pyarrow's HDFS client (libhdfs) needs Hadoop's jars: export "
                'CLASSPATH="$(hadoop classpath --glob)", or set HADOOP_HOME to a Hadoop with '
                "bin/hadoop; or pip install hdfs-native, which needs neither."
            )
        return "pyarrow"
    raise StoreConfigError(
        "no HDFS client for the hdfs:// store: install hdfs-native (pip install hdfs-native, no "
        "Java needed), or point ARROW_LIBHDFS_DIR (or HADOOP_HOME) at a Hadoop with "
        "lib/native/libhdfs.so for pyarrow."
    )


def open_hdfs(
    url: str, storage_options: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> tuple[Any, str]:
    """Open an ``hdfs://`` store: ``(fsspec file system, root path)``.

    ``storage_options`` are Hadoop properties for hdfs-native (e.g.
    ``{"dfs.client.failover.max.attempts": "3"}``; without that setting here or in
    ``HADOOP_CONF_DIR``, :data:`FAILOVER_ATTEMPTS`) and ``default_block_size`` (bytes a file
    opened for reading fetches per DataNode request: 1 MiB, 0 for one request per read; see
    :mod:`scalelab.store.access.readahead`), or keyword arguments of pyarrow's
    ``HadoopFileSystem`` (``user``, ``kerb_ticket``, ``extra_conf``) in the fallback.
    hdfs-native's file system is :class:`~scalelab.store.access.hdfs_fork.ForkSafeHdfsFileSystem`,
    which a forked child (a DataLoader worker) may use as well as the parent.

    Raises
    ------
    StoreConfigError
        Bad Hadoop configuration, no ticket where Kerberos is required, or no client.
    """
    import fsspec

    env = os.environ if environ is None else environ
    conf = read_hadoop_conf(env.get("HADOOP_CONF_DIR"))
    target = resolve_hdfs(url, conf)
    check_kerberos(conf, env, os.getuid())
    options = dict(storage_options)
    skip = options.pop("skip_instance_cache", True)
    if choose_client(env) == "hdfs-native":
        block = options.pop("default_block_size", None)
        config = {str(k): str(v) for k, v in options.items()}
        if FAILOVER_ATTEMPTS_KEY not in config and FAILOVER_ATTEMPTS_KEY not in conf:
            config[FAILOVER_ATTEMPTS_KEY] = FAILOVER_ATTEMPTS
        netloc = urlsplit(url).netloc or urlsplit(conf.get("fs.defaultFS", "")).netloc
        from scalelab.store.access.hdfs_fork import ForkSafeHdfsFileSystem

        own = {} if block is None else {"default_block_size": int(block)}
        fs = ForkSafeHdfsFileSystem(
            skip_instance_cache=skip, **_native_host(netloc), **config, **own
        )
        return fs, target.path
    host = target.nameservice or target.namenodes[0][0]
    port = 0 if target.nameservice else target.namenodes[0][1]
    cache = ticket_cache(env, os.getuid()) if kerberos_required(conf) else None
    if cache:
        options.setdefault("kerb_ticket", cache)
    fs = fsspec.filesystem("arrow_hdfs", host=host, port=port, skip_instance_cache=skip, **options)
    return fs, target.path


def make_hdfs_home(fs: Any, path: str, owner: str, mode: int = 0o700) -> bool:
    """Make the folder ``path`` (absolute, in ``fs``) with its parents, then give it to
    ``owner`` with ``mode``, unless it exists; True when it was made.

    ``fs`` is hdfs-native's fsspec file system (``fs.client``: ``set_owner``,
    ``set_permission``) or fsspec's WebHDFS (``chown``, ``chmod``); either must act as a user
    HDFS lets change owners (its superuser).

    Raises
    ------
    PermissionError, RuntimeError, OSError
        What the client raises when the namenode refuses or cannot be reached.
    """
    if fs.exists(path):
        return False
    fs.makedirs(path, exist_ok=True)
    client = getattr(fs, "client", None)
    if client is not None and hasattr(client, "set_owner"):  # hdfs-native
        client.set_owner(path, owner)
        client.set_permission(path, mode)
    else:  # WebHDFS
        fs.chown(path, owner=owner)
        fs.chmod(path, f"{mode:o}")
    return True


def _native_host(netloc: str) -> dict[str, Any]:
    host, _, port = netloc.rpartition(":") if ":" in netloc else (netloc, "", "")
    return {"host": host, "port": int(port)} if port else {"host": netloc}


#: The namenode's reason in hdfs-native's error text, ``RPCError("<class>", "<message>\n\tat ...")``
#: in Rust's debug form (quotes and line breaks escaped).
_NATIVE_REFUSAL = re.compile(r'AccessControlException", "((?:[^"\\]|\\")*?)(?:\\n|"\))')


def hdfs_refusal(exc: BaseException) -> PermissionError | None:
    """HDFS's permissions refusing a client, as a ``PermissionError`` with the namenode's reason
    on one line (``Permission denied: user=alice, access=WRITE, inode="/course/datasets":...``);
    None when ``exc`` is no such refusal (pure).

    hdfs-native raises the namenode's ``AccessControlException`` as a ``RuntimeError`` whose text
    holds the Java stack trace; fsspec's WebHDFS raises requests' ``HTTPError`` (403) when the
    datanode refuses a write, the reason only in the response's JSON, and a ``PermissionError``
    with the bare reason when the namenode refuses. All three get the same form.
    """
    if isinstance(exc, PermissionError):
        text = str(exc)
        if not text.startswith("Permission denied: user="):  # not the namenode's (a local file)
            return None
        reason = text.splitlines()[0]
    elif isinstance(exc, RuntimeError):
        found = _NATIVE_REFUSAL.search(str(exc))
        if found is None:
            return None
        reason = found.group(1).replace('\\"', '"')
    elif type(exc).__name__ == "HTTPError" and "/webhdfs/v1/" in str(exc):
        response = getattr(exc, "response", None)
        if getattr(response, "status_code", None) != 403:
            return None
        try:
            remote = response.json()["RemoteException"]
            reason = f"{remote['message']}".splitlines()[0]
        except (ValueError, KeyError, TypeError, IndexError):
            reason = "403 Forbidden"
    else:
        return None
    return PermissionError(f"HDFS refused it: {reason}")


def namenode_addresses(url: str, environ: Mapping[str, str]) -> str:
    """The namenode(s) an ``hdfs://`` or ``webhdfs://`` store URL reaches, as ``host:port``
    separated by commas (an HA nameservice's from ``HADOOP_CONF_DIR``); the URL's own host and
    port where the configuration cannot resolve it. Reads ``HADOOP_CONF_DIR``'s files."""
    parts = urlsplit(url)
    if parts.scheme == "hdfs":
        try:
            target = resolve_hdfs(url, read_hadoop_conf(environ.get("HADOOP_CONF_DIR")))
        except StoreConfigError:
            return parts.netloc or "the namenode of fs.defaultFS"
        return ", ".join(f"{host}:{port}" for host, port in target.namenodes)
    return parts.netloc


def namenode_unreachable(url: str, exc: BaseException, environ: Mapping[str, str]) -> str:
    """One line for a namenode that cannot be reached: its address, the client's reason, and
    what to check (pure but for reading ``HADOOP_CONF_DIR``)."""
    reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return (
        f"the course store {url} cannot be reached: the namenode at "
        f"{namenode_addresses(url, environ)} does not answer ({reason}). Check that the namenode "
        "is running (ops: hdfs haadmin / the namenode's log) and its address in "
        "c.ScaleLabSpawner.store_url or HADOOP_CONF_DIR. The client gives up after "
        f"{FAILOVER_ATTEMPTS_KEY} retries (ScaleLab's default {FAILOVER_ATTEMPTS}; raise it in "
        "store_options or hdfs-site.xml to wait through a namenode restart). Files are written "
        "whole or not at all: nothing half-written was left."
    )


def hdfs_failure(
    url: str, exc: BaseException, environ: Mapping[str, str] | None = None
) -> Exception | None:
    """``exc`` from an HDFS store call as ScaleLab's one-line error, or None when it is none of
    these: a missing or expired Kerberos ticket (:class:`KerberosTicketError`, see
    :mod:`scalelab.store.access.kerberos`), HDFS's permissions refusing the identity (a
    ``PermissionError``, :func:`hdfs_refusal`). Unreachable namenodes are the caller's (it knows
    whether the error is one): :func:`namenode_unreachable` words them."""
    env = os.environ if environ is None else environ
    ticket = ticket_failure(exc, KerberosLogin.from_environ(env, os.getuid()))
    return ticket if ticket is not None else hdfs_refusal(exc)
