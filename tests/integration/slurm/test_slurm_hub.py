"""ScaleLabSlurmSpawner under a real hub, against the real Slurm of tests/support/slurmcluster.py:
4 GPUs
(GRES) on 2 nodes, with accounting (slurmdbd, sacct). Servers are real single-user servers
started by Slurm jobs; what a server was given is read from its environment through /proc and
from its spawner state. The pending page is seen in Debian's Chromium (Playwright), which saves
docs/screenshot-slurm-pending.png."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from scalelab.common.ports import free_port
from tests.browser.test_browser import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import REPO
from tests.support.hubproc import NO_WARM_KERNEL, PlainHub, progress_events
from tests.support.slurmcluster import SlurmTestCluster

STUDENTS = ("alice", "bob", "carol", "dave")
#: What each node's GPUs read on the servers (declared readings: no GPU on this machine; a GPU
#: node's server reads NVML), by the node's device index: GRES gpu0 is idle, gpu1 trains.
DECLARED = {"GPU-node-0": [0.0, 512], "GPU-node-1": [87.5, 30000]}
PENDING_SCREENSHOT = REPO / "docs" / "screenshot-slurm-pending.png"


def slurm_config(
    cluster: SlurmTestCluster,
    state: Path,
    extra: str = "",
    *,
    root_jobs: bool = True,
    shared: Path | None = None,
) -> str:
    """The operator's configuration of a hub whose servers are jobs of ``cluster``: the homes
    and the store in ``shared`` (default ``state``); ``root_jobs``: jobs submitted as the hub's
    user, root (no ``exec_prefix``, ``--allow-root``), else through batchspawner's default
    ``sudo -E -u {username}``."""
    shared = shared or state
    as_root = (
        'c.ScaleLabSlurmSpawner.exec_prefix = ""\n'
        f"c.ScaleLabSlurmSpawner.args = ['--allow-root', {NO_WARM_KERNEL!r}]\n"
    )
    return (
        'c.JupyterHub.spawner_class = "scalelab.spawner.slurm.ScaleLabSlurmSpawner"\n'
        f"c.ScaleLabSlurmSpawner.store_url = {(shared / 'store').as_uri()!r}\n"
        f"c.ScaleLabSlurmSpawner.kernelspec_path = [{str(state / 'share' / 'jupyter')!r}]\n"
        f"c.ScaleLabSlurmSpawner.home_root = {str(shared / 'homes')!r}\n"
        'c.ScaleLabSlurmSpawner.gpu_queue_file = ""\n'
        + (as_root if root_jobs else "")
        + f"c.ScaleLabSlurmSpawner.environment = {{'SLURM_CONF': {str(cluster.conf)!r}}}\n"
        'c.ScaleLabSlurmSpawner.slurm_time_limit = "30"\n'
        "c.ScaleLabSlurmSpawner.poll_interval = 2\n"
        "c.ScaleLabSlurmSpawner.startup_poll_interval = 0.5\n"
        "c.ScaleLabSlurmSpawner.slurm_queue_poll_interval = 1\n" + extra
    )


@pytest.fixture
def hub(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PlainHub]:
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))  # the hub's own squeue, scontrol
    state = tmp_path / "state"
    state.mkdir()
    # the servers' configuration: their GPU reports read declared readings (batchspawner puts
    # the arguments unquoted into the job's script, so a file rather than JSON on the command)
    server_config = state / "server_config.py"
    server_config.write_text(
        'c.GPUReporter.source_class = "scalelab.spawner.gpu_source.DeclaredReadings"\n'
        f"c.DeclaredReadings.readings = {DECLARED!r}\n"
    )
    plain = PlainHub(
        state,
        slurm_config(
            slurm_cluster,
            state,
            "c.GPUPolicy.dated_limits = [{'from': '2026-01-01', 'groups': ['exam'], "
            "'max_gpus_per_server': 0}]\n"
            # a 1-minute limit, for the one test of a job that Slurm ends at its time limit
            "c.ScaleLabSlurmSpawner.profiles = [\n"
            "    {'slug': 'cpu', 'display_name': 'CPU only', 'default': True},\n"
            "    {'slug': 'cpu-1min', 'display_name': 'CPU only, 1 minute'},\n"
            "    {'slug': 'gpu-1', 'display_name': '1 GPU', 'gpus': 1},\n"
            "    {'slug': 'gpu-2', 'display_name': '2 GPUs', 'gpus': 2},\n"
            "]\n"
            "c.ScaleLabSlurmSpawner.slurm_profiles = {'cpu-1min': {'time': '1'}}\n"
            f"c.ScaleLabSlurmSpawner.args = ['--allow-root', '--config={server_config}', "
            f"{NO_WARM_KERNEL!r}]\n"
            "c.ScaleLabSlurmSpawner.gpu_report_interval = 1\n"
            # a hub restart leaves the servers' jobs running (the fixture cancels them at the end)
            "c.JupyterHub.cleanup_servers = False\n",
        ),
    )
    try:
        plain.start()
        yield plain
    finally:
        plain.close()
        slurm_cluster.command("scancel", "--full", "-u", "root")


def _ask(hub: PlainHub, user: str, profile: str) -> int:
    if hub.api("GET", f"/users/{user}").status_code == 404:
        assert hub.api("POST", f"/users/{user}").status_code == 201
    return hub.api("POST", f"/users/{user}/server", json={"user_options": {"profile": profile}})


def ready(hub: PlainHub, user: str, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        server = hub.api("GET", f"/users/{user}").json()["servers"].get("")
        if server and server["ready"]:
            return server
        time.sleep(0.5)
    raise AssertionError(f"{user}'s server never got ready:\n{_log_tail(hub)}")


def gone(hub: PlainHub, user: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while hub.api("GET", f"/users/{user}").json()["servers"]:
        assert time.monotonic() < deadline, f"{user}'s server never went away"
        time.sleep(0.5)


def _log_tail(hub: PlainHub) -> str:
    return (hub.state / "hub.log").read_text(errors="replace")[-4000:]


def server_process(user: str) -> psutil.Process:
    """The running single-user server of ``user`` (not ``srun``, the job step's launcher, which
    has the server's environment and command line too)."""
    for proc in psutil.process_iter():
        try:
            if (
                proc.environ().get("JUPYTERHUB_USER") == user
                and "jupyterhub-singleuser" in " ".join(proc.cmdline())
                and proc.name() != "srun"
            ):
                return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    raise AssertionError(f"no running server of {user}")


def _server_env(user: str) -> dict[str, str]:
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if env.get("JUPYTERHUB_USER") == user and "jupyterhub-singleuser" in " ".join(
                proc.cmdline()
            ):
                return env
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    raise AssertionError(f"no running server of {user}")


def _log_in(page: Page, hub: PlainHub, user: str) -> None:
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")


@pytest.mark.browser
def test_four_gpus_on_two_nodes_a_queue_in_the_browser_and_a_time_limit_told(
    hub: PlainHub, slurm_cluster: SlurmTestCluster
):
    """4 students get the 4 GPUs on two nodes; a fifth waits in Slurm's queue and sees her place
    and Slurm's estimated start on the pending page (screenshot), cancels, starts again. Along
    the way (the only test that waits for Slurm's time limit check, about 30 s apart), a
    1-minute job ends with TIMEOUT, and its student is told so on her spawn form."""
    # ivy's job first: Slurm ends it at its time limit while the rest of the test runs
    assert _ask(hub, "ivy", "cpu-1min").status_code in (201, 202)
    timed_out = ready(hub, "ivy")["state"]["job_id"]

    held: dict[str, tuple[str, str]] = {}
    for user in STUDENTS:
        assert _ask(hub, user, "gpu-1").status_code in (201, 202)
    for user in STUDENTS:
        server = ready(hub, user)
        slurm = server["state"]["slurm"]
        env = _server_env(user)
        assert env["SLURM_JOB_ID"] == slurm["job_id"]
        # Slurm's GPU, not the hub's: its index on the node, and the only device the job sees
        # (ConstrainDevices), so CUDA numbers it 0
        assert env["SLURM_JOB_GPUS"] == str(slurm["gpus"][0])
        assert env["CUDA_VISIBLE_DEVICES"] == "0"
        held[user] = (slurm["node"], env["SLURM_JOB_GPUS"])
        assert server["state"]["scalelab"]["gpus"] == [f"{slurm['node']}/gpu{slurm['gpus'][0]}"]
    assert sorted(held.values()) == [("n1", "0"), ("n1", "1"), ("n2", "0"), ("n2", "1")]

    board = hub.api("GET", "/scalelab/gpus").json()
    assert board["source"] == "slurm"
    holders = {g["uuid"]: g["holder"]["user"] for g in board["gpus"] if g["holder"]}
    assert holders == {f"{node}/gpu{i}": user for user, (node, i) in held.items()}

    # another user of the cluster asked for a GPU first, outside the hub
    outside = slurm_cluster.command(
        "sbatch", "--parsable", "--gres=gpu:1", "--time=30", "--output=/dev/null",
        "--wrap", "sleep 600",
    ).strip()  # fmt: skip
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            # erin asks for a GPU in the browser and waits in Slurm's queue, behind the other
            # job: her place and Slurm's estimated start (squeue --start) on the pending page
            page = browser.new_page(viewport={"width": 1280, "height": 480})
            _log_in(page, hub, "erin")
            expect(page.locator(".scalelab-free").first).to_have_text(
                "0 of 4 GPUs free", timeout=60_000
            )
            page.check("#profile-gpu-1")
            page.get_by_role("button", name="Start").click()
            message = page.locator("#progress-message")
            expect(message).to_contain_text("you are number 2 of 2", timeout=60_000)
            expect(message).to_contain_text("Slurm's estimated start: at ")
            expect(page.locator("#scalelab-queue-help")).to_contain_text("Slurm's queue")
            page.screenshot(path=str(PENDING_SCREENSHOT), animations="disabled")

            events = progress_events(hub, "erin", lambda e: "position" in e.get("slurm", {}))
            place = events[-1]["slurm"]
            assert (place["position"], place["length"]) == (2, 2)
            assert place["estimated_start"] is not None  # backfill's, from the time limits
            assert place["reason"] in ("Priority", "Resources")
            assert f"waits for: {place['reason']}" in message.inner_text()
            assert "you are number 2 of 2" in events[-1]["message"]
            assert "estimated start at" in events[-1]["message"]
            job = place["job_id"]
            assert f"{job} PENDING" in " ".join(slurm_cluster.jobs())
            slurm_cluster.command("scancel", outside)

            # she cancels (Stop Server): the job leaves Slurm's queue; she can start at once
            page.get_by_role("button", name="Stop Server").click()
            gone(hub, "erin")
            assert not [j for j in slurm_cluster.jobs() if j.startswith(f"{job} ")]
            assert _ask(hub, "erin", "cpu").status_code in (201, 202)
            ready(hub, "erin")
            assert _server_env("erin")["CUDA_VISIBLE_DEVICES"] == ""

            # Slurm ended ivy's job at its time limit: sacct says TIMEOUT, and so does her form
            gone(hub, "ivy", timeout_s=180)
            sacct = slurm_cluster.command("sacct", "-n", "-P", "-X", "-o", "State", "-j", timed_out)
            assert sacct.split() == ["TIMEOUT"]
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            _log_in(page, hub, "ivy")
            expect(page.locator("#scalelab-last-exit")).to_contain_text(
                f"Slurm ended job {timed_out}: it reached its time limit (TIMEOUT", timeout=60_000
            )
        finally:
            browser.close()


def _node_state(cluster: SlurmTestCluster, node: str) -> str:
    return cluster.command("sinfo", "-h", "-n", node, "-o", "%t").strip()


def _node_in_service(cluster: SlurmTestCluster, node: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while (state := _node_state(cluster, node)) not in ("idle", "mix", "alloc"):
        assert time.monotonic() < deadline, f"node {node} never came back: {state}"
        time.sleep(0.5)


def test_jobs_ended_outside_the_hub_are_told_with_slurms_reason(
    hub: PlainHub, slurm_cluster: SlurmTestCluster
):
    """An operator's scancel (CANCELLED), then a node going down under a job (NODE_FAIL; the
    job is not requeued): each student's server goes, with Slurm's reason, and its GPU with it."""
    assert _ask(hub, "frank", "gpu-1").status_code in (201, 202)
    job = ready(hub, "frank")["state"]["slurm"]["job_id"]
    slurm_cluster.command("scancel", job)  # an operator's scancel, not the hub's
    gone(hub, "frank")  # poll found it ended
    told = f"Slurm ended job {job}: it was cancelled (scancel) (CANCELLED)"
    log = (hub.state / "hub.log").read_text(errors="replace")
    assert f"frank/ died ({told}) while holding GPU(s)" in log
    board = hub.api("GET", "/scalelab/gpus").json()
    assert all(g["holder"] is None for g in board["gpus"])  # its GPU went back
    # the student can start again at once
    assert _ask(hub, "frank", "cpu").status_code in (201, 202)
    ready(hub, "frank")

    # the node under gus's job goes down (as slurmctld marks a node that stops answering)
    assert _ask(hub, "gus", "gpu-1").status_code in (201, 202)
    slurm = ready(hub, "gus")["state"]["slurm"]
    node = slurm["node"]
    slurm_cluster.command("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=test")
    try:
        gone(hub, "gus")
        sacct = slurm_cluster.command(
            "sacct", "-n", "-P", "-X", "-o", "State", "-j", slurm["job_id"]
        )
        assert sacct.split() == ["NODE_FAIL"]  # ended, not requeued (--no-requeue)
        told = f"Slurm ended job {slurm['job_id']}: its node failed (NODE_FAIL"
        log = (hub.state / "hub.log").read_text(errors="replace")
        assert f"gus/ died ({told}" in log
        assert not [j for j in slurm_cluster.jobs() if j.startswith(f"{slurm['job_id']} ")]
    finally:  # back to service (ReturnToService=2 may have done it when slurmd registered)
        if slurm_cluster.command("sinfo", "-h", "-n", node, "-o", "%t").strip() != "idle":
            subprocess.run(
                ["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                env=slurm_cluster.env, capture_output=True, timeout=60, check=False,
            )  # fmt: skip
        _node_in_service(slurm_cluster, node)


def test_dated_cap_refuses_before_anything_is_submitted(
    hub: PlainHub, slurm_cluster: SlurmTestCluster
):
    assert hub.api("POST", "/users/gina").status_code == 201
    assert hub.api("POST", "/groups/exam").status_code in (201, 409)
    assert hub.api("POST", "/groups/exam/users", json={"users": ["gina"]}).status_code == 200
    before = slurm_cluster.jobs()
    answer = hub.api("POST", "/users/gina/server", json={"user_options": {"profile": "gpu-1"}})
    assert answer.status_code in (400, 409), answer.text
    assert "from 2026-01-01" in answer.text
    assert slurm_cluster.jobs() == before  # nothing reached Slurm


def test_a_restarted_hub_knows_the_job_its_node_and_gpus(
    hub: PlainHub, slurm_cluster: SlurmTestCluster
):
    assert _ask(hub, "hana", "gpu-2").status_code in (201, 202)
    before = ready(hub, "hana")["state"]
    hub.stop()  # the server keeps running in its job
    hub.start()
    after = ready(hub, "hana")["state"]
    assert after["job_id"] == before["job_id"] and after["slurm"] == before["slurm"]
    assert len(before["slurm"]["gpus"]) == 2
    board = hub.api("GET", "/scalelab/gpus").json()
    held = sorted(g["uuid"] for g in board["gpus"] if g["holder"])
    node = before["slurm"]["node"]
    assert held == [f"{node}/gpu0", f"{node}/gpu1"]

    # the server reads its GPUs on its node and reports them under the hub's names, to the
    # restarted hub too: the GPU board (and the GPU monitor's idle warning through it) sees them
    env = _server_env("hana")
    assert (env["SLURMD_NODENAME"], env["SLURM_JOB_GPUS"]) == (node, "0,1")
    assert env["SCALELAB_GPU_REPORT_S"] == "1"
    deadline = time.monotonic() + 60
    while True:
        board = {g["uuid"]: g for g in hub.api("GET", "/scalelab/gpus").json()["gpus"]}
        readings = [(board[u]["utilization_pct"], board[u]["memory_used_mib"]) for u in held]
        if None not in (util for util, _ in readings):
            break
        assert time.monotonic() < deadline, f"no reading of {held} on the board:\n{_log_tail(hub)}"
        time.sleep(0.5)
    assert readings == [(0.0, 512), (87.5, 30000)]
    assert all(g["utilization_pct"] is None for g in board.values() if g["uuid"] not in held)
    assert hub.api("GET", "/users/hana/server/progress").status_code in (200, 400)
    assert hub.api("DELETE", "/users/hana/server").status_code in (202, 204)
    gone(hub, "hana")
    assert not [j for j in slurm_cluster.jobs() if j.startswith(f"{before['job_id']} ")]


def test_stop_while_squeue_runs_cancels_the_pending_job(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Stop during a pending start, while the spawner's ``squeue`` runs: batchspawner's
    ``run_command`` catches the cancellation and kills ``squeue``, whose failure must not read as
    the job gone (which forgot the job id, so Stop's ``scancel`` never came and the job stayed
    PENDING in Slurm's queue). Here each ``squeue`` of the start takes 3 s (a marker file while
    it runs) and the job waits an hour (``--begin``), so the Stop lands inside one."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    state = tmp_path / "state"
    state.mkdir()
    marker = tmp_path / "squeue-running"
    query = f"touch {marker}; sleep 3; squeue -h -j {{job_id}} -o '%T %B'; rm -f {marker}"
    plain = PlainHub(
        state,
        slurm_config(
            slurm_cluster,
            state,
            f"c.ScaleLabSlurmSpawner.batch_query_cmd = {query!r}\n"
            "c.ScaleLabSlurmSpawner.slurm_profiles = {'cpu': {'options': ['--begin=now+3600']}}\n",
        ),
    )
    try:
        plain.start()
        assert _ask(plain, "iris", "cpu").status_code == 202  # pending
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline, f"no squeue ran:\n{_log_tail(plain)}"
            time.sleep(0.05)
        [job] = [line.split()[0] for line in slurm_cluster.jobs() if " PENDING " in line]
        assert plain.api("DELETE", "/users/iris/server").status_code in (202, 204)
        gone(plain, "iris")
        assert not [j for j in slurm_cluster.jobs() if j.startswith(f"{job} ")], _log_tail(plain)
        log = (state / "hub.log").read_text(errors="replace")
        assert "neither pending nor running" not in log
        assert "Task exception was never retrieved" not in log
        # she can start again at once
        assert _ask(plain, "iris", "cpu").status_code == 202
    finally:
        plain.close()
        slurm_cluster.command("scancel", "--full", "-u", "root")


def test_a_gpu_slurm_gives_on_before_the_hubs_poll_stays_with_its_new_job(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The ledger follows Slurm's record. All 4 GPUs busy (3 jobs outside the hub, kim's
    server); lea waits in Slurm's queue; kim's job is cancelled outside the hub and Slurm starts
    lea's job on its GPU. The hub's poll of kim comes an hour later here, so lea's start always
    sees the GPU first (the race an operator hit: the hub then said "held by kim/", released it
    with kim and showed it free while lea ran on it). Kim's stop must free nothing of lea's."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    state = tmp_path / "state"
    state.mkdir()
    plain = PlainHub(
        state,
        slurm_config(
            slurm_cluster,
            state,
            "c.ScaleLabSlurmSpawner.profiles = [\n"
            "    {'slug': 'cpu', 'display_name': 'CPU only', 'default': True},\n"
            "    {'slug': 'gpu-1', 'display_name': '1 GPU', 'gpus': 1},\n"
            "]\n"
            "c.ScaleLabSlurmSpawner.poll_interval = 3600\n",
        ),
    )
    sleeper = ["sbatch", "--parsable", "--gres=gpu:1", "--time=30", "--output=/dev/null"]
    outside = [slurm_cluster.command(*sleeper, "--wrap", "sleep 600").strip() for _ in range(3)]
    try:
        plain.start()
        assert _ask(plain, "kim", "gpu-1").status_code in (201, 202)
        kim = ready(plain, "kim")["state"]
        [kims_gpu] = kim["scalelab"]["gpus"]
        assert _ask(plain, "lea", "gpu-1").status_code == 202  # in Slurm's queue
        progress_events(plain, "lea", lambda e: "position" in e.get("slurm", {}))
        slurm_cluster.command("scancel", kim["job_id"])  # outside the hub
        lea = ready(plain, "lea")["state"]
        assert lea["scalelab"]["gpus"] == [kims_gpu]  # Slurm gave her kim's GPU
        log = (state / "hub.log").read_text(errors="replace")
        assert (
            f"Slurm gave GPU(s) {kims_gpu} to job {lea['job_id']} of lea/: kim/'s job no longer "
            "holds them" in log
        )
        assert "is held by kim/" not in log
        holders = {
            g["uuid"]: g["holder"] for g in plain.api("GET", "/scalelab/gpus").json()["gpus"]
        }
        assert {u: h["user"] for u, h in holders.items() if h} == {kims_gpu: "lea"}

        # kim's server is stopped (as the hub's poll would, finding the job gone): lea keeps it
        assert plain.api("DELETE", "/users/kim/server").status_code in (202, 204)
        gone(plain, "kim")
        board = plain.api("GET", "/scalelab/gpus").json()
        assert {g["uuid"]: g["holder"]["user"] for g in board["gpus"] if g["holder"]} == {
            kims_gpu: "lea"
        }
        metrics = plain.api("GET", "/../metrics").text
        assert "scalelab_gpus_allocated 1.0" in metrics
    finally:
        plain.close()
        slurm_cluster.command("scancel", "--full", "-u", "root", *outside)


def _doctor(config: Path, state: Path) -> tuple[int, str]:
    argv = [sys.executable, "-m", "scalelab", "doctor", "--quick", "--state-dir", str(state)]
    result = subprocess.run(
        [*argv, "--config", str(config), "--port", str(free_port())],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def test_scalelab_doctor_checks_slurm_on_a_slurm_configuration(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
):
    """The Slurm spawner's own section is read (not c.ScaleLabSpawner's), Slurm's commands and
    controller are asked, and the way jobs are submitted is checked: on the test cluster's
    configuration, with the controller's port wrong, and as root without --allow-root."""
    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "jupyterhub_config.py"
    config.write_text(slurm_config(slurm_cluster, state))
    code, out = _doctor(config, tmp_path / "doctor-state")
    lines = out.splitlines()
    assert "[ ok ] Slurm commands: sbatch, squeue, scancel, scontrol, sacct found" in lines, out
    [controller] = [line for line in lines if "Slurm controller" in line]
    assert controller.startswith("[ ok ]") and " is UP (SLURM_CONF=" in controller, out
    assert "[ ok ] Slurm jobs: submitted as the hub's own user" in lines, out
    # the default profiles' jobs (GPU ones among them) go to the default partition: up, GRES
    assert "[ ok ] Slurm partitions: the default partition ('gpu') is up (gpu:2)" in lines, out
    assert f"[ ok ] Homes: {state / 'homes'}" in out  # c.ScaleLabSlurmSpawner.home_root
    # the test cluster confines jobs as a course cluster does (tests/support/slurmcluster.py)
    held = "[ ok ] Slurm confinement: each job held to its own processes, GPUs (task/cgroup)"
    assert held in lines, out

    # the controller's port wrong in the hub's slurm.conf: a failure naming the file and the fix
    wrong = tmp_path / "slurm-wrong.conf"
    wrong.write_text(
        re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={free_port()}", slurm_cluster.conf.read_text())
    )
    broken = slurm_config(slurm_cluster, state).replace(str(slurm_cluster.conf), str(wrong))
    config.write_text(broken)
    code, out = _doctor(config, tmp_path / "doctor-state")
    assert code == 1
    [controller] = [line for line in out.splitlines() if line.startswith("[FAIL] Slurm contr")]
    assert controller.startswith(
        f"[FAIL] Slurm controller: scontrol ping (SLURM_CONF={wrong}): Slurmctld(primary) at "
    )
    assert controller.endswith(" is DOWN")  # Slurm's banner after it left out
    assert "Slurm partitions" not in out  # sinfo would only say the controller is down again
    assert "Start slurmctld, or point the hub at the cluster's slurm.conf" in out

    # a root hub submitting without a prefix and without --allow-root: refused, named; and a
    # GPU profile's jobs sent to a partition the cluster does not have
    config.write_text(
        slurm_config(slurm_cluster, state)
        + f"c.ScaleLabSlurmSpawner.args = ['--debug', {NO_WARM_KERNEL!r}]\n"
        + "c.ScaleLabSlurmSpawner.slurm_profiles = {'gpu-1': {'partition': 'h100'}}\n"
        + "c.ScaleLabSlurmSpawner.mem_limit = '2G'\n"
    )
    code, out = _doctor(config, tmp_path / "doctor-state")
    assert code == 1
    assert "Slurm confinement: each job held to its own processes, GPUs, memory" in out, out
    assert "[FAIL] Slurm partitions: partition 'h100' does not exist" in out, out
    assert "sinfo lists the cluster's partitions and their GRES" in out
    assert (
        "[FAIL] Slurm jobs: c.ScaleLabSlurmSpawner.exec_prefix = '' on a hub run as root submits "
        "every job as root" in out
    )
