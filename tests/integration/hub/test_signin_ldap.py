"""Sign-in against a university's LDAP directory, as the operators' guide configures it: a real
``slapd`` (``tests/support/ldapserver.py``), JupyterHub's ``ldapauthenticator`` in a hub on
ScaleLab's configuration, the directory's groups mapped by ``c.DirectoryGroups`` to the hub's
groups (a GPU cap) and admins, refreshed at every login.

The mapping itself (pure): ``tests/unit/test_directory_groups.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from tests.support.hubproc import TWO_FAKE_GPUS, PlainHub, form_login
from tests.support.ldapserver import Directory, group_dn

PEOPLE = {"ada": "ada-pw-1", "bo": "bo-pw-2", "cy": "cy-pw-3"}
#: ada: a TA (an admin) in the course; bo: a student; cy: in the directory, not in the course.
GROUPS = {"ml-course": ["ada", "bo"], "tas": ["ada"], "physics": ["cy"]}


def ldap_config(port: int) -> str:
    """The operators' guide's LDAP recipe, with the test directory's address (no TLS here:
    ``tls_strategy = "insecure"``; a course's directory takes ``ldaps``)."""
    course, tas = group_dn("ml-course"), group_dn("tas")
    return f"""
c.JupyterHub.authenticator_class = "ldapauthenticator.LDAPAuthenticator"
c.LDAPAuthenticator.server_address = "127.0.0.1"
c.LDAPAuthenticator.server_port = {port}
c.LDAPAuthenticator.tls_strategy = "insecure"
c.LDAPAuthenticator.bind_dn_template = ["uid={{username}},ou=people,dc=university,dc=example"]
c.LDAPAuthenticator.allowed_groups = [{course!r}, {tas!r}]
c.Authenticator.allow_all = False  # scalelab up's shared password let anyone in
c.DirectoryGroups.group_map = {{{course!r}: "ml-course", {tas!r}: "tas"}}
c.DirectoryGroups.admin_groups = [{tas!r}]
c.GPUPolicy.group_limits = {{"ml-course": {{"max_gpus_per_user": 1}}}}
"""


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PlainHub, Directory]]:
    folder = tmp_path_factory.mktemp("signin")
    with Directory(folder / "ldap", PEOPLE, GROUPS) as directory:
        hub = PlainHub(folder / "state", TWO_FAKE_GPUS + ldap_config(directory.port))
        try:
            hub.start()
            yield hub, directory
        finally:
            hub.close()


def login(hub: PlainHub, user: str, password: str) -> requests.Response:
    with requests.Session() as session:
        return form_login(session, hub.url, user, password)


def test_the_directorys_people_sign_in_with_their_groups_and_admins(course):
    hub, _ = course
    for user in ("ada", "bo"):
        assert login(hub, user, PEOPLE[user]).status_code == 302, user
    ada, bo = (hub.api("GET", f"/users/{u}").json() for u in ("ada", "bo"))
    assert (ada["admin"], sorted(ada["groups"])) == (True, ["ml-course", "tas"])
    assert (bo["admin"], bo["groups"]) == (False, ["ml-course"])
    # A wrong password, someone outside the course's groups, someone not in the directory.
    for user, password in (("bo", "not-bo-pw"), ("cy", PEOPLE["cy"]), ("zed", "zed-pw")):
        answer = login(hub, user, password)
        assert answer.status_code != 302 and "Invalid username or password" in answer.text
    assert hub.api("GET", "/users/cy").status_code == 404


def test_the_group_cap_from_the_directory_holds(course):
    hub, _ = course
    assert login(hub, "bo", PEOPLE["bo"]).status_code == 302
    refused = hub.api("POST", "/users/bo/server", json={"user_options": {"profile": "gpu-2"}})
    assert refused.status_code == 409, refused.text
    assert "at most 1" in refused.json()["message"] and "ml-course" in refused.json()["message"]
    assert hub.api("GET", "/users/bo").json()["servers"] == {}


def test_leaving_the_tas_group_ends_admin_at_the_next_login(course):
    hub, directory = course
    tas = group_dn("tas")
    directory.modify(
        f"dn: {tas}\nchangetype: modify\ndelete: member\nmember: uid=ada,ou=people,"
        "dc=university,dc=example\n-\nadd: member\nmember: cn=admin,dc=university,dc=example\n"
    )
    assert login(hub, "ada", PEOPLE["ada"]).status_code == 302
    ada = hub.api("GET", "/users/ada").json()
    assert (ada["admin"], ada["groups"]) == (False, ["ml-course"])
    # The directory decides: a member an admin adds by hand is gone at their next login.
    added = hub.api("POST", "/groups/tas/users", json={"users": ["bo"]})
    assert added.status_code == 200 and "tas" in hub.api("GET", "/users/bo").json()["groups"]
    assert login(hub, "bo", PEOPLE["bo"]).status_code == 302
    assert hub.api("GET", "/users/bo").json()["groups"] == ["ml-course"]
