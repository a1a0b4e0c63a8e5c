"""A university directory's groups as the hub's groups and admins, refreshed at every login.

The authenticator signs students in against the directory (LDAP: ``ldapauthenticator``; OpenID
Connect: ``oauthenticator``'s generic one); at each login :func:`post_auth_hook` (JupyterHub's
``Authenticator.post_auth_hook``) maps the directory groups the authenticator found to JupyterHub
groups (``DirectoryGroups.group_map``), which ``GPUPolicy.group_limits``, ``dated_limits`` and
profiles' ``groups`` name, and makes a user an admin exactly while they are in one of
``DirectoryGroups.admin_groups``. JupyterHub applies both (``Authenticator.manage_groups``).
:func:`scalelab.hub_ext.hub.install.configure_directory` wires the hook when
``c.DirectoryGroups`` is set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from traitlets import Dict, List, Unicode
from traitlets.config import Configurable


class DirectoryGroups(Configurable):
    """Which directory groups are which hub groups, and which make admins."""

    group_map = Dict(
        key_trait=Unicode(),
        value_trait=Unicode(),
        config=True,
        help="""Directory group -> JupyterHub group, applied at every login: a user is in
        exactly the hub groups their directory groups map to (others are left out). Keys are
        what the authenticator reports: an LDAP group's DN (ldapauthenticator reports those of
        its `allowed_groups` the user is in) or an OpenID Connect group name (the `groups`
        claim). Example: {"cn=ml-course,ou=groups,dc=uni,dc=example": "ml-course"}.""",
    )
    admin_groups = List(
        Unicode(),
        config=True,
        help="""Directory groups whose members are hub admins, checked at every login: a user
        who left them is no longer an admin at their next login (`admin_users` stay admins).
        Same keys as `group_map`.""",
    )
    claim = Unicode(
        "groups",
        config=True,
        help="""The OpenID Connect userinfo claim that lists a user's groups (oauthenticator's
        auth_state["oauth_user"]).""",
    )

    @property
    def active(self) -> bool:
        """Whether any mapping is configured."""
        return bool(self.group_map or self.admin_groups)

    def directory_groups(self, authentication: Mapping[str, Any]) -> set[str]:
        """The directory groups an authenticator reported for one login (pure): LDAP's
        ``auth_state["ldap_groups"]``, the OpenID Connect claim :attr:`claim` of
        ``auth_state["oauth_user"]``, and any ``groups`` the authenticator set itself."""
        state = authentication.get("auth_state") or {}
        found: set[str] = set(_names(state.get("ldap_groups")))
        found |= set(_names((state.get("oauth_user") or {}).get(self.claim)))
        found |= set(_names(authentication.get("groups")))
        return found

    def apply(self, authentication: dict[str, Any], admin_users: Iterable[str]) -> dict[str, Any]:
        """``authentication`` with ``groups`` (sorted hub groups) and, where
        :attr:`admin_groups` is set, ``admin`` (True for a member or one of ``admin_users``,
        else False); changed in place and returned (pure)."""
        found = self.directory_groups(authentication)
        authentication["groups"] = sorted({self.group_map[g] for g in found if g in self.group_map})
        if self.admin_groups:
            listed = authentication.get("name") in set(admin_users)
            authentication["admin"] = listed or bool(found & set(self.admin_groups))
        return authentication


def _names(value: Any) -> list[str]:
    """A claim's group names: a list of strings, or one string (some providers)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str)]
    return []


def post_auth_hook(authenticator: Any, _handler: Any, authentication: dict) -> dict:
    """``c.Authenticator.post_auth_hook``: the login's groups and admin flag from
    ``c.DirectoryGroups`` (see :meth:`DirectoryGroups.apply`)."""
    groups = DirectoryGroups(config=authenticator.config)
    return groups.apply(authentication, authenticator.admin_users)
