"""Bad configuration and bad names, refused up front with one clear message (issue 6, Must 3, 5).

``scalelab doctor --config`` and ``scalelab up --config`` run the hub's own start-up validation
before the hub starts; a user name that cannot be a home folder is refused at login by
JupyterHub's ``Authenticator.username_pattern``; a home that cannot be created is a clean spawn
failure; a bad ``SCALELAB_STORE_OPTIONS`` names the variable. Real hub, proxy, Java and Spark.

The parts that need no running service: ``tests/unit/test_config_faults.py``.
"""

from __future__ import annotations

import time

import requests

from tests.support.hubproc import ScaleLabUp, running


def test_long_names_are_refused_at_login_and_a_bad_home_fails_the_spawn_cleanly(tmp_path):
    homes = tmp_path / "homes-is-a-file"
    homes.write_text("ops made a mistake")
    up = ScaleLabUp(
        tmp_path / "state", extra_config=f"c.ScaleLabSpawner.home_root = {str(homes)!r}\n"
    )
    with running(up) as hub:
        long_name = "a" * 300
        with requests.Session() as session:
            session.get(f"{hub.url}/hub/login", timeout=30)
            form = {"username": long_name, "password": hub.password}
            form["_xsrf"] = session.cookies.get("_xsrf")
            login = session.post(f"{hub.url}/hub/login", data=form, timeout=30)
        assert login.status_code == 403
        assert "Invalid username or password" in login.text  # JupyterHub's own message
        assert hub.api("GET", f"/users/{long_name}").status_code == 404  # no user was made

        assert hub.api("POST", "/users/alice").status_code == 201
        spawn = hub.api("POST", "/users/alice/server")
        expected = f"its home folder {homes / 'alice'} cannot be created (Not a directory)"
        assert spawn.status_code in (202, 503), spawn.text  # 202: slow spawn, failed later
        if spawn.status_code == 503:
            assert expected in spawn.json()["message"]
        deadline = time.monotonic() + 120
        while hub.api("GET", "/users/alice").json()["pending"] and time.monotonic() < deadline:
            time.sleep(1)
        model = hub.api("GET", "/users/alice").json()
        assert model["servers"] == {} and model["pending"] is None
        assert hub.api("GET", "/").status_code == 200  # the hub stays healthy
        assert homes.read_text() == "ops made a mistake"  # nothing overwritten

        homes.unlink()  # ops fix it: the next start works, without restarting the hub
        homes.mkdir()
        server = hub.start_server("alice")
        assert server["ready"] and (homes / "alice").is_dir()
        assert hub.api("DELETE", "/users/alice/server").status_code in (202, 204)
    log = (up.state_dir / "logs" / "jupyterhub.log").read_text()
    log = log.split("Received signal SIGTERM")[0]  # until Ctrl-C (services' own exits differ)
    failed = [ln for ln in log.splitlines() if "Not starting alice's server" in ln]
    assert len(failed) == 1 and expected in failed[0], failed  # one line, the reason in it
    assert "Traceback" not in log and "NotADirectoryError" not in log
