"""Where a single-user server's and its Spark drivers' logs live, and which names are logs (pure).

The server extension writes ``<log dir>/server.log``, each PySpark kernel its driver's
``<log dir>/spark-driver-<pid>.log``; the server's live-log pages and the hub's admin pages serve
only names that match :data:`LOG_NAME`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from scalelab import envvars

#: The student's own log folder, under their home (where no ``SCALELAB_LOG_DIR`` is set).
STUDENT_LOG_FOLDER = (".scalelab", "logs")
#: Names of logs that may be served: ``server.log``, ``spark-driver-1234.log``.
LOG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,120}\.log$")


def log_dir(environ: Mapping[str, str]) -> Path:
    """The folder of the server's and drivers' logs.

    ``SCALELAB_LOG_DIR`` when set, else ``$HOME/.scalelab/logs`` (the student's home, so the
    logs outlive the server and nobody else's server sees them).
    """
    configured = environ.get(envvars.LOG_DIR)
    if configured:
        return Path(configured)
    return Path(environ.get("HOME") or os.path.expanduser("~")).joinpath(*STUDENT_LOG_FOLDER)
