"""Refused server options (issue 11): the parts that need no running hub, kernel or cluster. The
rest runs for real in ``tests/integration/hub/test_spawn_refusals.py``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytest_asyncio
from jupyterhub import orm
from tornado import web
from traitlets.config import Config

from scalelab.hub_ext.hub import server_patch
from scalelab.hub_ext.hub.server_patch import ServerPatchHandler, unknown_fields_message
from scalelab.spawner import ScaleLabSpawner, refusals
from scalelab.spawner.gpu_pool import GPUPool
from scalelab.spawner.refusals import OptionsRefused, QuietEchoes, refuse

TWO = [{"uuid": "GPU-fake-0", "memory_mib": 1024}, {"uuid": "GPU-fake-1"}]


#: Tampered options, the status and (part of) the message the client gets.
TAMPERED = [
    ({"profile": "a100"}, 400, "unknown profile 'a100'; offered: cpu, gpu-1, gpu-2"),
    ({"profile": "gpu-1", "gpus": 99}, 400, "between 0 and 1 for profile 'gpu-1', not 99"),
    ({"gpus": -1}, 400, "'gpus' must be between 0 and 0 for profile 'cpu', not -1"),
    ({"profile": "gpu-1", "gpus": "x"}, 400, "'gpus' must be a whole number, not 'x'"),
    ({"profile": "gpu-1", "gpus": True}, 400, "'gpus' must be a whole number, not True"),
    ({"spark_driver_memory": "64g"}, 400, "must be one of 1g, 2g, 4g, not '64g'"),
    ({"spark_driver_memory": 5}, 400, "'spark_driver_memory' must be one of 1g, 2g, 4g, not 5"),
    ({"profile": ["gpu-1"]}, 400, "unknown profile ['gpu-1']"),
    ({"gpu": 1}, 400, "unknown option(s) ['gpu']; allowed:"),
    ({"profile": "x" * 5000}, 400, "unknown profile 'xxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx'"),
]


OVER_SHARE = ({"profile": "gpu-2"}, 409, "you may hold at most 1 (GPUPolicy.max_gpus_per_user)")


class Records(logging.Handler):
    """Keeps the records it is given (after its filters, as a real handler writes them)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self, level: int = logging.WARNING) -> list[tuple[str, str]]:
        return [(r.levelname, r.getMessage()) for r in self.records if r.levelno >= level]


@pytest.fixture
def hub_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[logging.Logger, Records]]:
    """A log like the hub's (``JupyterHub.log``: its own handler, not propagating), and a fresh
    memory of refusals."""
    monkeypatch.setattr(refusals, "_recent", OrderedDict())
    logger = logging.getLogger(f"test-refusals-{uuid.uuid4().hex}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = Records()
    logger.addHandler(handler)
    yield logger, handler
    logger.removeHandler(handler)


@pytest_asyncio.fixture
async def spawner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hub_log
) -> AsyncIterator[ScaleLabSpawner]:
    """Mallory's spawner on a hub of two declared GPUs, at most one per user; no pool yet."""
    monkeypatch.setattr(GPUPool, "_current", None)
    monkeypatch.setattr(GPUPool, "_building", None)
    monkeypatch.setattr(GPUPool, "_restores", [])
    c = Config()
    c.ScaleLabSpawner.declared_gpus = TWO
    c.ScaleLabSpawner.gpu_queue_file = str(tmp_path / "queue.json")
    c.ScaleLabSpawner.home_root = str(tmp_path / "homes")
    c.ScaleLabSpawner.store_url = "file:///srv/course"
    c.GPUPolicy.max_gpus_per_user = 1
    user = SimpleNamespace(name="mallory", url="/user/mallory/", groups=[], admin=False)
    spawner = ScaleLabSpawner(config=c, user=user)
    spawner.log = hub_log[0]
    yield spawner
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _echo_as_jupyterhub_does(log: logging.Logger, exc: web.HTTPError) -> None:
    """What JupyterHub and tornado log after the hook's error, word for word: ``User.spawn``,
    the spawn form's ``SpawnHandler._post`` and ``_wrap_spawn_single_user``, tornado's
    ``RequestHandler.log_exception``, and the pending page's ``Previous spawn ... failed``."""
    log.error(f"Error starting mallory's server: {exc}")
    log.error(f"Error starting server mallory: {exc}")
    log.error(
        "Failed to spawn single-user server with form",
        exc_info=(type(exc), exc, exc.__traceback__),
    )
    summary = "POST /hub/api/users/mallory/server (127.0.0.1)"
    log.warning("%d %s: %s", exc.status_code, summary, exc.get_message())
    log.error("Previous spawn for %s failed: %s", "mallory", exc)


@pytest.mark.asyncio
@pytest.mark.parametrize(("options", "status", "message"), [*TAMPERED, OVER_SHARE])
async def test_a_refused_start_is_the_same_http_error_and_one_warning_line(
    spawner: ScaleLabSpawner, hub_log, options: dict, status: int, message: str
):
    log, handler = hub_log
    with pytest.raises(web.HTTPError) as info:
        await spawner._run_apply_user_options(options)  # JupyterHub's runner of the hook
    exc = info.value
    _echo_as_jupyterhub_does(log, exc)

    # The client's answer: as before the issue (status, and the message JupyterHub relays).
    assert isinstance(exc, OptionsRefused)
    assert exc.status_code == status
    reason = exc.get_message()
    assert message in reason
    assert reason.startswith("Invalid server options: ") == (status == 400)
    phrase = {400: "Bad Request", 409: "Conflict"}[status]
    assert str(exc) == f"HTTP {status}: {phrase} ({reason})"  # in JupyterHub's own lines
    assert len(reason) < 300  # an untrusted value never floods the message or the log

    # The hub log: one warning line naming the user and the reason, nothing else about it.
    assert handler.lines() == [
        ("WARNING", f"Refused a start for user mallory (HTTP {status}): {reason}")
    ]
    assert all(r.exc_info is None for r in handler.records if r.levelno >= logging.WARNING)
    assert spawner._request is None  # nothing to allocate


@pytest.mark.asyncio
async def test_good_options_log_no_warning_and_are_kept(spawner: ScaleLabSpawner, hub_log):
    await spawner._run_apply_user_options({"profile": "gpu-1", "spark_driver_memory": "2g"})
    assert hub_log[1].lines() == []
    assert spawner._request is not None and spawner._request.gpus == 1


@pytest.mark.asyncio
async def test_a_profiles_limits_hold_for_its_start_only(spawner: ScaleLabSpawner):
    spawner.mem_limit, spawner.cpu_limit = "2G", 1.0  # the spawner's own (c.Spawner.*)
    spawner.profiles = [
        {"slug": "cpu", "default": True},
        {"slug": "big", "mem_limit": "8G", "cpu_limit": 4},
        {"slug": "gpu-1", "gpus": 1, "mem_limit": 32 * 2**30},
    ]
    seen = []
    for profile in ("big", "cpu", "gpu-1", "big"):
        await spawner._run_apply_user_options({"profile": profile})
        seen.append((spawner.mem_limit // 2**30, spawner.cpu_limit))
    # Each start gets its profile's limits, or the spawner's own where the profile sets none.
    assert seen == [(8, 4.0), (2, 1.0), (32, 1.0), (8, 4.0)]


@pytest.mark.asyncio
async def test_a_named_server_is_named_in_the_line(spawner: ScaleLabSpawner, hub_log):
    spawner.orm_spawner = orm.Spawner(name="exp", user_options={"profile": "a100"})  # no db
    with pytest.raises(web.HTTPError):
        await spawner._run_apply_user_options({"profile": "a100"})
    [(level, line)] = hub_log[1].lines()
    assert level == "WARNING"
    assert line.startswith("Refused a start for user mallory, server 'exp' (HTTP 400): ")
    assert spawner.orm_spawner.user_options is None  # not reused by the next start


def test_every_other_record_passes_and_an_echo_only_within_its_window(
    hub_log, monkeypatch: pytest.MonkeyPatch
):
    log, handler = hub_log
    refusal = refuse(log, "mallory", "", 400, "Invalid server options: unknown profile 'a100'")
    log.info("Error starting mallory's server: %s", refusal)  # below warning: passes
    log.error("Error starting bob's server: HTTP 500: disk full")  # another error: passes
    try:
        raise ValueError("a real bug")
    except ValueError:
        log.exception("Unhandled error starting bob's server")  # a real traceback: passes
    assert [line for _, line in handler.lines(logging.DEBUG)] == [
        "Refused a start for user mallory (HTTP 400): Invalid server options: unknown profile "
        "'a100'",
        "Error starting mallory's server: HTTP 400: Bad Request (Invalid server options: "
        "unknown profile 'a100')",
        "Error starting bob's server: HTTP 500: disk full",
        "Unhandled error starting bob's server",
    ]
    assert handler.records[-1].exc_info is not None

    # Past the echo window, the same text is no echo any more.
    monkeypatch.setattr(refusals, "ECHO_WINDOW_S", -1.0)
    refuse(log, "mallory", "", 400, "Invalid server options: unknown option(s) ['gpu']")
    handler.records.clear()
    log.error("a later line quoting Invalid server options: unknown option(s) ['gpu']")
    assert len(handler.lines()) == 1


def test_the_filter_goes_once_on_each_handler_of_the_hub_log(hub_log):
    log, handler = hub_log
    for _ in range(3):
        refuse(log, "mallory", "", 400, "Invalid server options: unknown profile 'a100'")
    assert sum(isinstance(f, QuietEchoes) for f in handler.filters) == 1


def test_only_4xx_is_a_refusal_and_the_memory_of_refusals_is_bounded(
    hub_log, monkeypatch: pytest.MonkeyPatch
):
    with pytest.raises(ValueError, match="4xx"):
        refuse(hub_log[0], "mallory", "", 500, "ScaleLab is misconfigured")
    monkeypatch.setattr(refusals, "MAX_REMEMBERED", 5)
    for n in range(20):
        refusals._remember(f"refusal {n}")
    assert list(refusals._recent) == [f"refusal {n}" for n in range(15, 20)]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"user_options": {"profile": "gpu-1"}}, None),
        ({"display_name": "Exp", "name": "exp"}, None),
        ([1, 2], None),  # not an object: JupyterHub's own 400
        (None, None),
        (
            {"profile": "gpu-1"},
            "unknown field(s) ['profile'] in a server PATCH; allowed: display_name, name, "
            "user_options (server options go inside 'user_options')",
        ),
        (
            {"user_options": {}, "gpus": 1, "colour": "red"},
            "unknown field(s) ['colour', 'gpus'] in a server PATCH; allowed: display_name, "
            "name, user_options",
        ),
    ],
)
def test_unknown_fields_of_a_server_patch_are_named(body, message):
    assert unknown_fields_message(body) == message


def test_a_flood_of_unknown_fields_is_cut_short():
    message = unknown_fields_message({f"k{n}": n for n in range(1000)})
    assert message is not None and len(message) < 200 and "..." in message


def test_the_patch_handler_takes_exactly_jupyterhubs_server_api_routes():
    from jupyterhub.apihandlers.users import UserServerAPIHandler

    assert issubclass(ServerPatchHandler, UserServerAPIHandler)
    assert server_patch.routes("/hub/") == [
        ("/hub/api/users/([^/]+)/server", ServerPatchHandler),
        ("/hub/api/users/([^/]+)/servers/([^/]*)", ServerPatchHandler),
    ]
