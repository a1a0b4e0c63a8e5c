"""A directory's groups as the hub's groups and admins (pure): ``scalelab.hub_ext.hub.directory``.
Against a real directory and hub: ``tests/integration/hub/test_signin_ldap.py``."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from scalelab.hub_ext.hub.config_check import ConfigProblem
from scalelab.hub_ext.hub.directory import DirectoryGroups, post_auth_hook
from scalelab.hub_ext.hub.install import configure_directory

COURSE = "cn=ml-course,ou=groups,dc=uni,dc=example"
TAS = "cn=tas,ou=groups,dc=uni,dc=example"


def groups(**settings) -> DirectoryGroups:
    c = Config()
    for key, value in settings.items():
        setattr(c.DirectoryGroups, key, value)
    return DirectoryGroups(config=c)


MAPPED = groups(group_map={COURSE: "ml-course", TAS: "tas", "oidc-ml": "ml-course"})


def test_ldap_groups_map_to_hub_groups_and_unmapped_ones_are_left_out():
    login = {"name": "bo", "auth_state": {"ldap_groups": [COURSE, "cn=library,dc=uni"]}}
    assert MAPPED.apply(login, admin_users=())["groups"] == ["ml-course"]
    assert "admin" not in login  # no admin_groups: the authenticator's own decision stands


def test_an_oidc_claim_a_single_string_and_an_authenticators_own_groups_count():
    oidc = {"name": "bo", "auth_state": {"oauth_user": {"groups": ["oidc-ml", 7]}}}
    assert MAPPED.apply(oidc, ())["groups"] == ["ml-course"]
    single = {"name": "bo", "auth_state": {"oauth_user": {"groups": TAS}}}
    assert MAPPED.apply(single, ())["groups"] == ["tas"]
    other_claim = groups(group_map={"ml": "ml-course"}, claim="roles")
    login = {"name": "bo", "auth_state": {"oauth_user": {"roles": ["ml"], "groups": ["x"]}}}
    assert other_claim.apply(login, ())["groups"] == ["ml-course"]
    own = {"name": "bo", "groups": [COURSE], "auth_state": None}
    assert MAPPED.apply(own, ())["groups"] == ["ml-course"]
    assert MAPPED.apply({"name": "bo"}, ())["groups"] == []  # no groups: none (synced away)


def test_admin_follows_the_admin_groups_and_admin_users_stay_admins():
    tas = groups(group_map={COURSE: "ml-course"}, admin_groups=[TAS])
    assert tas.apply({"name": "ada", "auth_state": {"ldap_groups": [TAS]}}, ())["admin"] is True
    left = {"name": "ada", "admin": True, "auth_state": {"ldap_groups": [COURSE]}}
    assert tas.apply(left, ())["admin"] is False  # left the TAs: no longer an admin
    ops = {"name": "ops", "auth_state": {"ldap_groups": []}}
    assert tas.apply(ops, admin_users={"ops"})["admin"] is True


class _Authenticator:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.admin_users = {"ops"}


def test_configure_wires_the_hook_only_when_groups_are_set_and_refuses_another_hook():
    c = Config()
    configure_directory(c)
    assert "post_auth_hook" not in c.Authenticator and "manage_groups" not in c.Authenticator
    c.DirectoryGroups.admin_groups = [TAS]
    configure_directory(c)
    assert c.Authenticator.post_auth_hook is post_auth_hook and c.Authenticator.manage_groups
    configure_directory(c)  # twice is fine
    login = {"name": "ops", "auth_state": {}}
    assert post_auth_hook(_Authenticator(c), None, login) == {**login, "groups": [], "admin": True}
    c.Authenticator.post_auth_hook = lambda *args: args[-1]
    with pytest.raises(ConfigProblem, match=r"post_auth_hook is set and c\.DirectoryGroups too"):
        configure_directory(c)
