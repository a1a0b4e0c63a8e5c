"""Sign-in through OpenID Connect, as the operators' guide configures it: panva's
``oidc-provider`` (a certified OpenID Provider library, run by ``tests/support/oidc_provider.mjs``
with a password form), ``oauthenticator``'s ``GenericOAuthenticator`` in a hub on ScaleLab's
configuration, the provider's ``groups`` claim mapped by ``c.DirectoryGroups`` to the hub's
groups and admins at every login. The whole browser flow is driven over HTTP: the hub's
redirect, the provider's form, its redirect back with a code, the hub's token exchange.

LDAP: ``tests/integration/hub/test_signin_ldap.py``; the mapping (pure):
``tests/unit/test_directory_groups.py``.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from scalelab.common.ports import free_port
from tests.support.hubproc import PlainHub

PROVIDER = Path(__file__).resolve().parents[2] / "support" / "oidc_provider.mjs"
PEOPLE = {
    "ada": {"password": "ada-pw-1", "groups": ["ml-course", "tas"]},
    "bo": {"password": "bo-pw-2", "groups": ["ml-course", "library"]},
    "cy": {"password": "cy-pw-3", "groups": ["physics"]},
}
CLIENT_ID = "scalelab-hub"


def oidc_config(issuer: str, secret: str, hub_url: str) -> str:
    """The operators' guide's OpenID Connect recipe, with the test provider's address."""
    return f"""
c.JupyterHub.authenticator_class = "generic-oauth"
c.GenericOAuthenticator.client_id = {CLIENT_ID!r}
c.GenericOAuthenticator.client_secret = {secret!r}
c.GenericOAuthenticator.oauth_callback_url = "{hub_url}/hub/oauth_callback"
c.GenericOAuthenticator.authorize_url = "{issuer}/auth"
c.GenericOAuthenticator.token_url = "{issuer}/token"
c.GenericOAuthenticator.userdata_url = "{issuer}/me"
c.GenericOAuthenticator.scope = ["openid", "profile"]
c.GenericOAuthenticator.username_claim = "preferred_username"
c.GenericOAuthenticator.auth_state_groups_key = "oauth_user.groups"
c.GenericOAuthenticator.allowed_groups = {{"ml-course", "tas"}}
c.Authenticator.allow_all = False  # scalelab up's shared password let anyone in
c.DirectoryGroups.group_map = {{"ml-course": "ml-course", "tas": "tas"}}
c.DirectoryGroups.admin_groups = ["tas"]
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlainHub]:
    folder = tmp_path_factory.mktemp("oidc")
    port, secret = free_port(), secrets.token_urlsafe(32)
    issuer = f"http://127.0.0.1:{port}"
    # The hub's address first (the provider registers its callback), then the provider.
    hub = PlainHub(folder / "state")
    (folder / "state" / "ops_config.py").write_text(
        oidc_config(issuer, secret, hub.url) + (folder / "state" / "ops_config.py").read_text()
    )
    client = {
        "client_id": CLIENT_ID,
        "client_secret": secret,
        "redirect_uris": [f"{hub.url}/hub/oauth_callback"],
    }
    log = open(folder / "provider.log", "w")
    provider = subprocess.Popen(
        ["node", str(PROVIDER), str(port), json.dumps({"people": PEOPLE, "client": client})],
        stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    try:
        assert provider.stdout.readline().strip() == "listening", (
            folder / "provider.log"
        ).read_text()
        hub.start()
        yield hub
    finally:
        hub.close()
        provider.terminate()
        provider.wait(timeout=30)
        provider.stdout.close()
        log.close()


def login(hub: PlainHub, user: str, password: str) -> tuple[requests.Response, str]:
    """The browser's way in: the hub sends it to the provider, whose form takes the password;
    returns the hub's answer to the provider's redirect back (a 302 into the hub when signed
    in), or the provider's page when it stopped there, and the text of the provider's form."""
    with requests.Session() as browser:
        page = browser.get(f"{hub.url}/hub/oauth_login", timeout=60)  # -> the provider's form
        action = re.search(r'action="([^"]+)"', page.text)
        assert page.status_code == 200 and action, page.text[:2000]
        issuer = page.url.split("/interaction/")[0]
        answer = browser.post(
            issuer + action[1], data={"login": user, "password": password}, timeout=60,
            allow_redirects=False,
        )  # fmt: skip
        # Follow the provider's redirects (consent granted without a page) up to the hub.
        while answer.is_redirect and not answer.headers["location"].startswith(hub.url):
            answer = browser.get(
                requests.compat.urljoin(answer.url, answer.headers["location"]),
                timeout=60,
                allow_redirects=False,
            )
        if not answer.is_redirect:
            return answer, answer.text
        back = browser.get(answer.headers["location"], timeout=60, allow_redirects=False)
        return back, page.text


def test_oidc_sign_in_brings_the_providers_groups_and_admins(hub: PlainHub):
    for user in ("ada", "bo"):
        back, _ = login(hub, user, PEOPLE[user]["password"])
        assert back.status_code == 302 and "/hub/" in back.headers["location"], back.text
    ada, bo = (hub.api("GET", f"/users/{u}").json() for u in ("ada", "bo"))
    assert (ada["admin"], sorted(ada["groups"])) == (True, ["ml-course", "tas"])
    assert (bo["admin"], bo["groups"]) == (False, ["ml-course"])  # "library" is not mapped


def test_a_wrong_password_stays_at_the_provider_and_outsiders_are_refused(hub: PlainHub):
    wrong, text = login(hub, "bo", "not-bo-pw")
    assert wrong.status_code == 200 and "Wrong user name or password" in text
    outsider, _ = login(hub, "cy", PEOPLE["cy"]["password"])  # signed in there, not a member
    assert outsider.status_code == 403, outsider.text
    assert hub.api("GET", "/users/cy").status_code == 404
