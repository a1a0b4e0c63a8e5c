"""Kerberos tickets for an HDFS store: what the student must run when theirs is missing or expired.

A missing or expired ticket, in hdfs-native's or WebHDFS's words, becomes one
:class:`~scalelab.store.errors.KerberosTicketError` naming the ``kinit`` command, from
``SCALELAB_KERBEROS_PRINCIPAL`` and ``SCALELAB_KERBEROS_KEYTAB``; pure but
:func:`ticket_cache_exists`. Why: docs/design-notes.md, scalelab.store.access.kerberos.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scalelab import envvars
from scalelab.store.errors import KerberosTicketError

#: MIT Kerberos' ticket cache when ``KRB5CCNAME`` is unset: its compiled-in ``DEFCCNAME``, the
#: file ``krb5cc_%{uid}`` in the root's ``tmp`` folder on every Unix (MIT's source), a system
#: convention rather than a path of ours; ``{uid}`` is the user's numeric id.
MIT_DEFAULT_CACHE = os.path.join(os.sep, "tmp", "krb5cc_{uid}")


@dataclass(frozen=True)
class KerberosLogin:
    """Who the server logs in as: the principal and its keytab (either may be unknown).

    Attributes
    ----------
    principal
        ``alice@EXAMPLE.ORG``, from ``SCALELAB_KERBEROS_PRINCIPAL``; None when unset.
    keytab
        Path of the principal's keytab, from ``SCALELAB_KERBEROS_KEYTAB``; None when unset.
    cache
        The ticket cache as ``KRB5CCNAME`` names it, or :data:`MIT_DEFAULT_CACHE`.
    """

    principal: str | None
    keytab: str | None
    cache: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], uid: int) -> KerberosLogin:
        """The login the environment describes (pure)."""
        default = f"FILE:{MIT_DEFAULT_CACHE.format(uid=uid)}"
        cache = environ.get("KRB5CCNAME", "").strip() or default
        return cls(
            environ.get(envvars.KERBEROS_PRINCIPAL, "").strip() or None,
            environ.get(envvars.KERBEROS_KEYTAB, "").strip() or None,
            cache,
        )

    def kinit(self) -> str:
        """The command that gets a ticket: ``kinit -kt KEYTAB PRINCIPAL`` (placeholders where
        unknown)."""
        return f"kinit -kt {self.keytab or '<your keytab>'} {self.principal or '<your principal>'}"

    def fix(self) -> str:
        """The fix, in one sentence: the ``kinit`` command, and where the names come from."""
        missing = [
            name
            for name, value in (
                (envvars.KERBEROS_PRINCIPAL, self.principal),
                (envvars.KERBEROS_KEYTAB, self.keytab),
            )
            if value is None
        ]
        where = (
            ""
            if not missing
            else f" ({' and '.join(missing)} unset: ask the course's operators for your principal "
            "and keytab)"
        )
        return (
            f"run {self.kinit()} in a terminal{where}, with KRB5CCNAME={self.cache} as in this "
            "server, then retry"
        )

    def who(self) -> str:
        return self.principal or "your principal"


def missing_ticket_error(login: KerberosLogin) -> KerberosTicketError:
    """The error for a Kerberos cluster and no ticket in the cache (pure)."""
    return KerberosTicketError(
        f"the HDFS store needs a Kerberos ticket for {login.who()} "
        "(hadoop.security.authentication = kerberos in HADOOP_CONF_DIR) and there is none in "
        f"the ticket cache {login.cache}: {login.fix()}."
    )


def expired_ticket_error(login: KerberosLogin) -> KerberosTicketError:
    """The error for a ticket that has expired (pure)."""
    return KerberosTicketError(
        f"the Kerberos ticket of {login.who()} in {login.cache} has expired, so HDFS refuses "
        f"the store: {login.fix()}."
    )


#: hdfs-native's GSSAPI failure: ``GSSAPIError(GssMajorCodes { ... routine_error: "GSS_S_NO_CRED"
#: ... }, <minor>, "<message>")``, in Rust's debug form.
_GSSAPI = re.compile(r'GSSAPIError\(.*?routine_error: "(\w+)".*?, -?\d+, "((?:[^"\\]|\\.)*)"\)')
_EXPIRED = re.compile(r"(?i)expired")


def ticket_failure(
    exc: BaseException,
    login: KerberosLogin,
    cache_exists: Callable[[str], bool] | None = None,
) -> KerberosTicketError | None:
    """``exc`` as the student's ticket being missing or expired, or None when it is not that.

    Parameters
    ----------
    exc
        What a client raised: hdfs-native's ``RuntimeError("GSSAPIError(...)")``, or requests'
        ``HTTPError`` with status 401 from ``/webhdfs/v1/`` (SPNEGO refused).
    login
        The server's principal, keytab and ticket cache, for the message.
    cache_exists
        Whether the ticket cache is there (for WebHDFS, whose 401 does not say which of the two
        it is): :func:`ticket_cache_exists` when None.

    Returns
    -------
    KerberosTicketError or None
        One line naming ``kinit``, the principal and the keytab. Another GSSAPI failure (a
        KDC that cannot be reached, a wrong realm) keeps the library's own reason in the line.
    """
    if isinstance(exc, RuntimeError):
        found = _GSSAPI.search(str(exc))
        if found is None:
            return None
        routine, reason = found.group(1), found.group(2).replace('\\"', '"')
        if routine == "GSS_S_NO_CRED":
            return missing_ticket_error(login)
        if routine == "GSS_S_CREDENTIALS_EXPIRED" or _EXPIRED.search(reason):
            return expired_ticket_error(login)
        return KerberosTicketError(
            f"Kerberos refused the ticket of {login.who()} in {login.cache} ({routine}: "
            f"{reason.splitlines()[0] if reason else 'no reason given'}): {login.fix()}."
        )
    if type(exc).__name__ == "HTTPError" and "/webhdfs/v1/" in str(exc):
        if getattr(getattr(exc, "response", None), "status_code", None) != 401:
            return None
        exists = ticket_cache_exists if cache_exists is None else cache_exists
        if not exists(login.cache):
            return missing_ticket_error(login)
        return KerberosTicketError(
            f"WebHDFS refused the Kerberos ticket of {login.who()} in {login.cache} (HTTP 401: "
            f"expired, or for another realm): {login.fix()}."
        )
    return None


def cache_file(cache: str) -> str | None:
    """The file of a ticket cache name (``FILE:/path`` or ``/path``), or None for a cache that
    is not a file (``KEYRING:``, ``KCM:``, ``DIR:``, ``MEMORY:``) (pure)."""
    if cache.startswith("FILE:"):
        return cache[len("FILE:") :]
    if ":" in cache.split("/", 1)[0]:
        return None
    return cache


def ticket_cache_exists(cache: str) -> bool:
    """Whether the ticket cache's file exists; True for a cache that is not a file."""
    path = cache_file(cache)
    return path is None or os.path.exists(path)
