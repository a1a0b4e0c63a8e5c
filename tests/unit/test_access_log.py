"""The access log's filter: ScaleLab's own routine requests at debug level, nothing else."""

from __future__ import annotations

import logging

import pytest

from scalelab.common.access_log import QuietServiceRequests, quiet_service_requests


def _logged(message: str, level: int = logging.INFO, logger_level: int = logging.INFO) -> list:
    """The records a handler on a fresh logger gets for one line, with the filter on."""
    logger = logging.getLogger(f"test.access.{id(message)}.{level}.{logger_level}")
    logger.setLevel(logger_level)
    logger.propagate = False
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    quiet_service_requests(logger)
    quiet_service_requests(logger)  # a second call adds nothing
    assert sum(isinstance(f, QuietServiceRequests) for f in logger.filters) == 1
    logger.log(level, message)
    return records


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        # the GPU monitor's poll of a server's kernels, of the hub; the culler's: quiet
        (
            "200 GET /user/alice/api/kernels?no_track_activity=1 (scalelab-gpu-monitor@::1) 0.7ms",
            False,
        ),
        (
            "200 GET /hub/api/users?state=[secret]&offset=0 (scalelab-gpu-monitor@::1) 14.93ms",
            False,
        ),
        ("200 GET /hub/api/users?state=[secret] (scalelab-idle-culler@10.0.0.2) 2.49ms", False),
        # a GPU server's periodic readings, under a base_url too: quiet
        ("200 POST /hub/api/scalelab/users/alice/gpu-readings (alice@127.0.0.1) 3.10ms", False),
        ("201 POST /course/hub/api/scalelab/users/bob/gpu-readings (bob@10.1.2.3) 1.00ms", False),
        # everything else stays: a student's request, a redirect, a failure, a slow answer
        ("200 GET /user/alice/api/kernels (alice@127.0.0.1) 0.77ms", True),
        ("302 GET /hub/api/users (scalelab-gpu-monitor@127.0.0.1) 1.00ms", True),
        ("503 GET /user/alice/api/kernels (scalelab-gpu-monitor@127.0.0.1) 1.00ms", True),
        ("200 GET /hub/api/users (scalelab-gpu-monitor@127.0.0.1) 1500.12ms", True),
        ("200 GET /hub/api/scalelab/users/alice/gpu-readings/x (alice@127.0.0.1) 1.00ms", True),
        ("200 GET /hub/api/users (scalelab-gpu-monitor-2@127.0.0.1) 1.00ms", True),
        ("the hub started", True),
    ],
)
def test_routine_successes_of_scalelabs_services_go_to_debug(line: str, kept: bool):
    records = _logged(line)
    assert [(r.getMessage(), r.levelname) for r in records] == ([(line, "INFO")] if kept else [])


def test_a_debug_log_still_shows_them_as_debug_and_warnings_are_untouched():
    line = "200 GET /hub/api/proxy (scalelab-gpu-monitor@127.0.0.1) 3.34ms"
    [record] = _logged(line, logger_level=logging.DEBUG)
    assert (record.levelno, record.levelname) == (logging.DEBUG, "DEBUG")
    [warning] = _logged(line, level=logging.WARNING)
    assert warning.levelname == "WARNING"
