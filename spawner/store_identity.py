"""Who a student's server is to the course store: the storage options each server gets.

A :class:`StoreIdentity` (the spawner's ``store_identity_class``) gives each student's server
its ``storage_options`` and environment: :class:`SharedStoreIdentity` (the hub's, the default:
no store-side enforcement), :class:`S3KeyFile` (a key per student), :class:`HDFSUserIdentity`.
Why: docs/design-notes.md, scalelab.spawner.store_identity.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

from jupyterhub.spawner import SpawnException
from traitlets import Bool, Enum, Unicode
from traitlets.config import LoggingConfigurable

from scalelab.common.classsetting import configured_class
from scalelab.common.strictconfig import StrictConfigurable
from scalelab.store.access.guard import DATASETS, HOMES
from scalelab.store.protocols import for_url, scheme_of
from scalelab.store.protocols.hdfs import HDFSProtocol, WebHDFSProtocol
from scalelab.store.protocols.s3 import S3Protocol

#: fsspec storage options (s3fs's, and botocore's through ``client_kwargs``) that carry who the
#: client is: never handed on from the hub to a server whose identity is its student's.
CREDENTIAL_KEYS = frozenset(
    {
        "key",
        "secret",
        "token",
        "username",
        "password",
        "anon",
        "profile",
        "profile_name",
        "session",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
    }
)
#: Of :data:`CREDENTIAL_KEYS`, those whose values are secrets (checked for in the environment).
SECRET_KEYS = frozenset(
    {
        "key",
        "secret",
        "token",
        "password",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
    }
)
#: Secret values shorter than this are not looked for in a server's environment (a real key is
#: 16 characters or more; a short one would match unrelated text).
MIN_SECRET_LENGTH = 8
#: The hub's environment variables that hold an S3 credential botocore would use.
AWS_SECRET_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
#: Storage options of fsspec's ``webhdfs`` and pyarrow's ``HadoopFileSystem`` that say who the
#: client is.
HDFS_IDENTITY_KEYS = frozenset({"user", "proxy_to", "token", "password", "kerberos", "kerb_ticket"})
#: Keys of one student's entry in :class:`S3KeyFile`'s file.
KEY_FILE_FIELDS = frozenset({"key", "secret", "token"})


def without_credentials(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with every credential dropped (:data:`CREDENTIAL_KEYS`, at the top and in
    ``client_kwargs``); the rest (endpoint, region, timeouts) kept (pure)."""
    kept = {k: v for k, v in options.items() if k not in CREDENTIAL_KEYS}
    if isinstance(kept.get("client_kwargs"), Mapping):
        client = {k: v for k, v in kept["client_kwargs"].items() if k not in CREDENTIAL_KEYS}
        if client:
            kept["client_kwargs"] = client
        else:
            del kept["client_kwargs"]
    return kept


def secret_values(options: Mapping[str, Any]) -> list[str]:
    """The secrets in ``options`` (values of :data:`SECRET_KEYS`, at the top and in
    ``client_kwargs``), each at least :data:`MIN_SECRET_LENGTH` long (pure)."""
    found = [options.get(k) for k in SECRET_KEYS]
    client = options.get("client_kwargs")
    if isinstance(client, Mapping):
        found += [client.get(k) for k in SECRET_KEYS]
    return [v for v in found if isinstance(v, str) and len(v) >= MIN_SECRET_LENGTH]


def leaked_credentials(
    env: Mapping[str, str], hub_options: Mapping[str, Any], hub_environ: Mapping[str, str]
) -> list[str]:
    """Names of the variables of ``env`` (a server's) whose value holds one of the hub's store
    secrets: those of ``hub_options``, and the :data:`AWS_SECRET_VARIABLES` of the hub's own
    environment ``hub_environ`` (pure)."""
    secrets = secret_values(hub_options) + [
        value
        for name in AWS_SECRET_VARIABLES
        if len(value := hub_environ.get(name, "")) >= MIN_SECRET_LENGTH
    ]
    return sorted(name for name, value in env.items() if any(s in str(value) for s in secrets))


def home_policy_paths(store_url: str, user: str) -> tuple[str, str, str]:
    """``(bucket, prefix of the student's home, prefix of the data sets)`` of an S3 store,
    prefixes without a leading ``/`` and ending in ``/`` (pure)."""
    parts = urlsplit(store_url)
    root = parts.path.strip("/")
    base = f"{root}/" if root else ""
    return parts.netloc, f"{base}{HOMES}/{user}/", f"{base}{DATASETS}/"


def student_s3_policy(store_url: str, user: str) -> dict[str, Any]:
    """The AWS-style IAM policy of ``user``'s key (the shape in :class:`S3KeyFile`) (pure)."""
    bucket, home, datasets = home_policy_paths(store_url, user)
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "OwnHomeReadWrite",
                "Effect": "Allow",
                "Action": [
                    "s3:GetObject",
                    "s3:PutObject",
                    "s3:DeleteObject",
                    "s3:AbortMultipartUpload",
                ],
                "Resource": f"arn:aws:s3:::{bucket}/{home}*",
            },
            {
                "Sid": "DatasetsReadOnly",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/{datasets}*",
            },
            {
                "Sid": "ListOwnHomeAndDatasets",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": [f"{home}*", f"{datasets}*"]}},
            },
        ],
    }


def seaweedfs_actions(store_url: str, user: str) -> list[str]:
    """The SeaweedFS identity ``actions`` that grant what :func:`student_s3_policy` grants (pure).

    SeaweedFS 4.48 matches an action ending in ``*`` as a prefix of
    ``<Action>:<bucket>/<object key>`` (``List`` against the listing's ``prefix``); an action
    without ``*`` is bucket-wide or nothing (``Read:course/home/alice`` grants nothing at all).
    ``Write`` covers PutObject, multipart uploads, CopyObject's target and DeleteObject.
    """
    bucket, home, datasets = home_policy_paths(store_url, user)
    return [
        *(f"{action}:{bucket}/{home}*" for action in ("Read", "Write", "List")),
        *(f"{action}:{bucket}/{datasets}*" for action in ("Read", "List")),
    ]


def identity_class(value: Any, where: str) -> type[StoreIdentity] | None:
    """The class a ``store_identity_class`` setting names (a class or an import path), None
    when unset.

    Raises
    ------
    ValueError
        It cannot be imported, or is not a :class:`StoreIdentity`; the message names ``where``.
    """
    return configured_class(
        value,
        StoreIdentity,
        where,
        "; use SharedStoreIdentity, S3KeyFile or HDFSUserIdentity from that module",
    )


class StoreIdentity(StrictConfigurable, LoggingConfigurable):
    """Who each student's server is to the course store (abstract; see the module).

    Made by the spawner with itself as parent (``c.<ClassName>`` settings, the spawner's log).
    Subclasses implement :meth:`server_store_options`, and :meth:`server_environment` where the
    store's client takes its identity from the environment (hdfs-native).

    Raises
    ------
    scalelab.common.strictconfig.UnknownSettingError
        When made with a configuration whose ``c.<ClassName>`` names a setting it does not have.
    """

    #: Whether the store itself, not only the guard, keeps students out of each other's homes.
    enforced: ClassVar[bool] = False
    #: The store URL schemes this identity is for (its protocols' ``schemes``); empty: any.
    protocols: ClassVar[tuple[str, ...]] = ()

    @property
    def spawner_section(self) -> str:
        """``"c.<spawner class>"``, for messages."""
        return f"c.{type(self.parent).__name__}" if self.parent is not None else "c.Spawner"

    def check_settings(self, store_url: str, where: str = "") -> None:
        """Check the settings against the store URL, without I/O (at hub start and each spawn).

        Parameters
        ----------
        store_url
            The spawner's ``store_url``; empty: not checked against it.
        where
            The spawner's section for messages (``"c.ScaleLabSpawner"``); default: the
            parent's.

        Raises
        ------
        ValueError
            A store URL this identity is not for, or a required setting unset; one line naming
            the setting and the fix.
        """
        protocol = scheme_of(store_url)
        if store_url and self.protocols and protocol not in self.protocols:
            section = where or self.spawner_section
            raise ValueError(
                f"{section}.store_identity_class = {type(self).__name__} is for "
                f"{' and '.join(p + '://' for p in self.protocols)} stores, not {store_url!r}: "
                "pick the identity class of the store's kind (SharedStoreIdentity for file://)"
            )

    def server_store_options(
        self, user: str, store_url: str, hub_options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The fsspec ``storage_options`` ``user``'s server gets (``SCALELAB_STORE_OPTIONS``).

        Parameters
        ----------
        user
            The JupyterHub user name.
        store_url, hub_options
            The spawner's ``store_url`` and ``store_options`` (the hub's own; not changed).

        Raises
        ------
        jupyterhub.spawner.SpawnException
            The server cannot get an identity; the message is the student's, the hub log says
            why.
        """
        raise NotImplementedError

    def server_environment(self, user: str, store_url: str) -> dict[str, str]:
        """Environment variables ``user``'s server gets besides the storage options; default
        none."""
        return {}

    def prepare_home(self, user: str, store_url: str, hub_options: Mapping[str, Any]) -> None:
        """Make ``user``'s home in the store before their server starts, where the store needs
        the hub to make it (blocking I/O: the spawner calls it in a thread); default nothing,
        since a student's own writes make it (local folders, object stores).

        Raises
        ------
        jupyterhub.spawner.SpawnException
            The home cannot be made; the message is the student's, the hub log says why.
        """

    def _refuse(
        self, user: str, problem: str, student_message: str, reason: str, status_code: int = 400
    ) -> SpawnException:
        """A ``SpawnException`` for the student, ``problem`` in the hub's log."""
        self.log.error("Store identity for %s: %s", user, problem)
        return SpawnException(
            student_message, reason=reason, log_message=problem, status_code=status_code
        )

    def _checked(self, user: str, store_url: str) -> None:
        try:
            self.check_settings(store_url)
        except ValueError as exc:
            raise self._refuse(
                user,
                str(exc),
                "Your server cannot start: the course store's access is misconfigured; ask the "
                "course's operators (the hub's log says what to fix).",
                "store-identity",
            ) from None


class SharedStoreIdentity(StoreIdentity):
    """The hub's storage options for every server, as they are: **no store-side enforcement**.

    Every server reaches the store with the hub's credential; only the guard in the student's
    own process keeps them to their home, which a student can bypass. A local ``file://`` store
    is still protected by file permissions when servers run as system users
    (``ScaleLabSpawner.system_users``); an S3 or HDFS store is not: use :class:`S3KeyFile` or
    :class:`HDFSUserIdentity` there.
    """

    def server_store_options(
        self, user: str, store_url: str, hub_options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``hub_options``, copied."""
        return dict(hub_options)


class S3KeyFile(StoreIdentity):
    """Each student's own S3 key, read from a JSON file ops keep (``c.S3KeyFile.key_file``).

    The file, mode 0600, owned by the hub's user::

        {"alice": {"key": "AKIA...", "secret": "..."},
         "bob": {"key": "...", "secret": "...", "token": "<session token, optional>"}}

    A server gets the hub's storage options (endpoint, region, timeouts) with every credential
    (``key``, ``secret``, ``token``, ``aws_access_key_id``, ``aws_secret_access_key``,
    ``aws_session_token``, ``username``/``password``, ``profile``, ``anon``, the same in
    ``client_kwargs``) replaced by its student's ``key``/``secret``/``token``: the hub's own key
    never reaches a server. The file is read again when it changes (mtime, size, inode), so ops
    add students without a restart.

    Each key must be limited by the store to its student's home. On AWS, the IAM policy of
    ``alice``'s key for the store ``s3://<bucket>/<prefix>`` (:func:`student_s3_policy`; as a
    bucket policy, each statement also names the key's user in ``"Principal": {"AWS":
    "arn:aws:iam::<account>:user/<alice's IAM user>"}``)::

        {"Version": "2012-10-17",
         "Statement": [
          {"Sid": "OwnHomeReadWrite", "Effect": "Allow",
           "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                      "s3:AbortMultipartUpload"],
           "Resource": "arn:aws:s3:::<bucket>/<prefix>/home/alice/*"},
          {"Sid": "DatasetsReadOnly", "Effect": "Allow",
           "Action": "s3:GetObject",
           "Resource": "arn:aws:s3:::<bucket>/<prefix>/datasets/*"},
          {"Sid": "ListOwnHomeAndDatasets", "Effect": "Allow",
           "Action": "s3:ListBucket",
           "Resource": "arn:aws:s3:::<bucket>",
           "Condition": {"StringLike": {"s3:prefix": ["<prefix>/home/alice/*",
                                                      "<prefix>/datasets/*"]}}}]}

    On SeaweedFS, the identity's actions (:func:`seaweedfs_actions`; checked against a real
    SeaweedFS 4.48 in ``tests/integration/s3/test_store_s3_isolation.py``)::

        ["Read:<bucket>/<prefix>/home/alice/*", "Write:<bucket>/<prefix>/home/alice/*",
         "List:<bucket>/<prefix>/home/alice/*",
         "Read:<bucket>/<prefix>/datasets/*", "List:<bucket>/<prefix>/datasets/*"]

    Such a key cannot list the store root nor ``home/`` (nor any prefix outside the two).

    Errors, at a server's start (``SpawnException``; the hub's log says which file and what to
    fix): ``key_file`` unset or missing; the file open to group or others ("chmod 600 <file>");
    not a JSON object of ``{"key": ..., "secret": ...}`` entries; no entry for the student
    ("no store credential for <user>; ask the course's operators").
    """

    enforced: ClassVar[bool] = True
    protocols: ClassVar[tuple[str, ...]] = S3Protocol.schemes

    key_file = Unicode(
        "",
        config=True,
        help="""JSON file of the students' own S3 keys, `{"alice": {"key": "...", "secret":
        "..."}, ...}` (optional `"token"`: a session token), mode 0600. Each server gets its
        student's key instead of the hub's (`store_options` keep the endpoint and other
        settings); a student missing from it cannot start a server. Read again when it changes.
        Required with `store_identity_class = S3KeyFile`.""",
    )

    _loaded: tuple[tuple[int, int, int], dict[str, dict[str, str]]] | None = None

    def check_settings(self, store_url: str, where: str = "") -> None:
        """:meth:`StoreIdentity.check_settings`, and ``key_file`` set."""
        super().check_settings(store_url, where)
        if not self.key_file:
            raise ValueError(
                "c.S3KeyFile.key_file is not set: point it at the JSON file of the students' "
                'keys ({"alice": {"key": "...", "secret": "..."}}, mode 0600)'
            )

    def credentials(self) -> dict[str, dict[str, str]]:
        """The file's entries, user -> ``{"key", "secret"[, "token"]}``; read again only when
        the file changed.

        Raises
        ------
        ValueError
            The file is missing, open to group or others, or not of the shape above; one line
            naming the file and the fix.
        """
        path = self.key_file
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise ValueError(
                f"c.S3KeyFile.key_file {path} does not exist: write the students' keys there "
                '({"alice": {"key": "...", "secret": "..."}}, mode 0600) or fix the path'
            ) from None
        except OSError as exc:
            raise ValueError(
                f"c.S3KeyFile.key_file {path} cannot be read ({exc.strerror}): make it readable "
                "by the hub's user, and by it only (chmod 600)"
            ) from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_mode & 0o077:
                raise ValueError(
                    f"c.S3KeyFile.key_file {path} is open to group or others (mode "
                    f"{stat.S_IMODE(st.st_mode):04o}): chmod 600 {path}"
                )
            signature = (st.st_mtime_ns, st.st_size, st.st_ino)
            if self._loaded is not None and self._loaded[0] == signature:
                return self._loaded[1]
            data = f.read()
        entries = parse_key_file(data, path)
        self._loaded = (signature, entries)
        self.log.info("Store identity: read %d student key(s) from %s", len(entries), path)
        return entries

    def server_store_options(
        self, user: str, store_url: str, hub_options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``hub_options`` without credentials, with ``user``'s ``key``, ``secret`` (and
        ``token``).

        Raises
        ------
        jupyterhub.spawner.SpawnException
            No entry for ``user`` ("no store credential for <user>; ask the course's
            operators"), or the file or settings are wrong (the hub's log says what to fix).
        """
        self._checked(user, store_url)
        try:
            entries = self.credentials()
        except ValueError as exc:
            raise self._refuse(
                user,
                str(exc),
                "Your server cannot start: the course store's keys cannot be read; ask the "
                "course's operators (the hub's log says what to fix).",
                "store-identity",
            ) from None
        entry = entries.get(user)
        if entry is None:
            raise self._refuse(
                user,
                f"no store credential for {user} in {self.key_file} (c.S3KeyFile.key_file): add "
                f'"{user}": {{"key": "...", "secret": "..."}} to it',
                f"Your server cannot start: no store credential for {user}; ask the course's "
                "operators.",
                "store-credential",
            )
        return {**without_credentials(hub_options), **entry}


def parse_key_file(data: bytes | str, path: str = "the key file") -> dict[str, dict[str, str]]:
    """The entries of :class:`S3KeyFile`'s file, checked (pure).

    Raises
    ------
    ValueError
        Not JSON, not an object of user -> ``{"key": str, "secret": str[, "token": str]}``; the
        message names ``path`` and the first wrong entry (never a secret).
    """
    try:
        loaded = json.loads(data)
    except ValueError as exc:
        raise ValueError(
            f"c.S3KeyFile.key_file {path} is not valid JSON ({exc.msg}, line {exc.lineno}): "
            'write {"alice": {"key": "...", "secret": "..."}, ...}'
        ) from None
    if not isinstance(loaded, dict):
        raise ValueError(
            f"c.S3KeyFile.key_file {path} must hold a JSON object of user -> "
            f'{{"key": "...", "secret": "..."}}, not a {type(loaded).__name__}'
        )
    entries: dict[str, dict[str, str]] = {}
    for user, entry in loaded.items():
        where = f"c.S3KeyFile.key_file {path}: the entry of {user!r}"
        if not isinstance(entry, dict):
            raise ValueError(f'{where} must be {{"key": "...", "secret": "..."}}')
        unknown = sorted(set(entry) - KEY_FILE_FIELDS)
        if unknown:
            raise ValueError(f"{where} has unknown key(s) {unknown}; allowed: key, secret, token")
        missing = sorted(k for k in ("key", "secret") if not entry.get(k))
        if missing:
            raise ValueError(f"{where} has no {' and no '.join(missing)}: add it")
        if not all(isinstance(v, str) for v in entry.values()):
            raise ValueError(f"{where} must have strings as key, secret and token")
        entries[user] = dict(entry)
    return entries


class HDFSUserIdentity(StoreIdentity):
    """The student's user name as the HDFS user, for ``hdfs://`` and ``webhdfs://`` stores.

    ``c.HDFSUserIdentity.mode``:

    - ``"simple"`` (the default; a cluster with ``hadoop.security.authentication = simple``):
      the server claims to be its student. ``webhdfs://``: the ``user`` option of fsspec's
      ``WebHDFS`` (``user.name=<user>`` on each request); ``hdfs://``: the ``user`` option of
      pyarrow's ``HadoopFileSystem`` (the fallback client) and ``HADOOP_USER_NAME=<user>`` in the
      environment, which hdfs-native (ScaleLab's first client) and Hadoop's own Java client
      read. Files get the student as owner and HDFS permissions keep one student's mistakes
      out of another's home; but simple authentication trusts whatever name a client sends, so
      a student who sets another name is not stopped: **no enforcement against a deliberate
      bypass** (that needs Kerberos).
    - ``"proxy"`` (a Kerberos cluster whose ``hadoop.proxyuser.<principal>.*`` lets the
      server's principal impersonate students): the server's Kerberos ticket (``kinit`` or
      ``KRB5CCNAME``) acts as the student. ``webhdfs://``: ``kerberos=True`` and
      ``proxy_to=<user>`` (``doas=<user>``; fsspec refuses ``user`` with Kerberos, so none is
      passed); ``hdfs://``: ``HADOOP_PROXY_USER=<user>``, read by hdfs-native. pyarrow's
      libhdfs has no impersonation option (its ``user`` with ``kerb_ticket`` only picks the
      principal in the ticket cache), so proxy mode on ``hdfs://`` needs hdfs-native. The
      impersonating principal's ticket is then within the server's reach, and with it a
      student can act as any student it may impersonate: this too is **not enforcement
      against a deliberate bypass**; that needs a Kerberos principal per student, or a
      delegation token per student fetched by the hub (``webhdfs`` ``token``,
      ``HADOOP_TOKEN_FILE_LOCATION``), which ScaleLab does not do yet.

    Any identity in the hub's options (``user``, ``proxy_to``, ``token``, ``password``, and
    ``kerberos``/``kerb_ticket`` in simple mode) is replaced. Tested without a namenode
    (``tests/unit/test_store_identity.py``) and, simple mode, on the HDFS test cluster
    (``tests/integration/hadoop/test_store_hdfs_cluster.py``: the student's files are theirs, and
    the namenode
    refuses ``datasets/`` and another student's home to a client without ScaleLab's guard).
    """

    protocols: ClassVar[tuple[str, ...]] = HDFSProtocol.schemes + WebHDFSProtocol.schemes

    mode = Enum(
        ["simple", "proxy"],
        default_value="simple",
        config=True,
        help="""How a server becomes its student on HDFS. `simple`: it claims the student's name
        (webhdfs `user`, pyarrow `user`, `HADOOP_USER_NAME`); HDFS trusts it, so this gives
        files the right owner but does not stop a student who claims another name. `proxy`
        (Kerberos): the server's principal impersonates the student (webhdfs `proxy_to`,
        `HADOOP_PROXY_USER` for hdfs-native); the cluster must allow that principal to
        impersonate students.""",
    )

    make_homes = Bool(
        True,
        config=True,
        help="""Whether the hub makes each student's `home/<user>` in the HDFS store before their
        server first starts: owned by the student, mode 0700, with the hub's own store options
        (it must be HDFS's superuser there, or allowed to chown). False: ops make the homes.""",
    )

    def server_store_options(
        self, user: str, store_url: str, hub_options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``hub_options`` with ``user`` as the HDFS user (see the class).

        Raises
        ------
        jupyterhub.spawner.SpawnException
            The store is not ``hdfs://`` or ``webhdfs://`` (the hub's log says so).
        """
        self._checked(user, store_url)
        protocol = scheme_of(store_url)
        if self.mode == "simple":
            options = {k: v for k, v in hub_options.items() if k not in HDFS_IDENTITY_KEYS}
            return {**options, "user": user}
        kept = HDFS_IDENTITY_KEYS - {"kerberos", "kerb_ticket"}
        options = {k: v for k, v in hub_options.items() if k not in kept}
        if protocol in WebHDFSProtocol.schemes:
            return {**options, "kerberos": True, "proxy_to": user}
        return options

    def server_environment(self, user: str, store_url: str) -> dict[str, str]:
        """``HADOOP_USER_NAME`` (simple) or ``HADOOP_PROXY_USER`` (proxy) for ``hdfs://``."""
        if scheme_of(store_url) not in HDFSProtocol.schemes:
            return {}
        return {"HADOOP_USER_NAME" if self.mode == "simple" else "HADOOP_PROXY_USER": user}

    def prepare_home(self, user: str, store_url: str, hub_options: Mapping[str, Any]) -> None:
        """Make ``home/<user>`` in the HDFS store, owned by ``user`` with mode 0700, when
        :attr:`make_homes` and it does not exist yet, with the hub's own storage options (as
        ``hdfs dfs -mkdir -p``, ``-chown``, ``-chmod 700`` would). An existing home is left as it
        is.

        Raises
        ------
        jupyterhub.spawner.SpawnException
            The namenode refused (400) or could not be reached (503: an outage, the student is
            asked to try again); the hub's log names the path, the namenode and the fix.
        """
        if not self.make_homes:
            return
        self._checked(user, store_url)
        from scalelab.store.access.fs import open_target
        from scalelab.store.access.hdfs import make_hdfs_home
        from scalelab.store.access.student import is_unreachable

        home = f"{HOMES}/{user}"
        try:
            fs, root = open_target(store_url, hub_options)
            made = make_hdfs_home(fs, f"{root.rstrip('/')}/{home}", user)
        except Exception as exc:  # noqa: BLE001 -- each client raises its own errors
            if is_unreachable(exc):  # an outage, not a setting: 503, and the namenode named
                wording = for_url(store_url).unreachable_message(store_url, exc, os.environ)
                raise self._refuse(
                    user,
                    f"cannot make {user}'s home {home}: {wording or exc}",
                    "Your server cannot start now: the course store does not answer. Try again "
                    "in a few minutes; if it lasts, tell the course's operators.",
                    "store-unavailable",
                    status_code=503,
                ) from None
            reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            raise self._refuse(
                user,
                f"cannot make {user}'s home {home} in the store {store_url}: {reason}. The hub "
                "must reach the namenode as HDFS's superuser (or a user allowed to chown); or "
                "set c.HDFSUserIdentity.make_homes = False and make each home yourself "
                f"(hdfs dfs -mkdir -p, -chown {user}, -chmod 700).",
                "Your server cannot start: your home in the course store could not be made; "
                "ask the course's operators (the hub's log says why).",
                "store-home",
            ) from None
        if made:
            self.log.info("Made %s's home %s in the store %s (mode 0700)", user, home, store_url)
