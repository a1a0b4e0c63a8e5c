"""sparkmagic's remote Spark kernels, offered when ops configure a Livy server.

``c.LivySettings`` gives each server sparkmagic's ``config.json`` (:func:`sparkmagic_config`)
and two kernelspecs (:func:`sparkmagic_kernelspecs`), run by a Python of their own
(``kernel_python``). Pure but :func:`write_sparkmagic_config`, :func:`prepare_server`,
:func:`sparkmagic_problem` and :func:`setup`. Why: docs/design-notes.md, scalelab.kernels.livy.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from traitlets import Dict, Enum, TraitError, Unicode, validate
from traitlets.config import Configurable

from scalelab import envvars
from scalelab.common.atomicfile import write_atomic

#: Fields of Livy's ``POST /sessions`` body (Livy REST API) that a session setting may use.
LIVY_SESSION_FIELDS = frozenset(
    {
        "kind",
        "proxyUser",
        "jars",
        "pyFiles",
        "files",
        "driverMemory",
        "driverCores",
        "executorMemory",
        "executorCores",
        "numExecutors",
        "archives",
        "queue",
        "name",
        "conf",
        "heartbeatTimeoutInSecond",
    }
)

#: sparkmagic's kernels: kernelspec name -> (display name, module, language).
SPARKMAGIC_KERNELS: dict[str, tuple[str, str, str]] = {
    "sparkmagic-pyspark": (
        "PySpark (remote, Livy)",
        "sparkmagic.kernels.pysparkkernel.pysparkkernel",
        "python",
    ),
    "sparkmagic-spark": (
        "Spark Scala (remote, Livy)",
        "sparkmagic.kernels.sparkkernel.sparkkernel",
        "scala",
    ),
}


class LivySettings(Configurable):
    """Where sparkmagic's remote Spark kernels send their code (Apache Livy), and which Python
    runs them."""

    url = Unicode(
        "",
        config=True,
        help="""Livy server URL, e.g. `http://livy.cluster:8998`. Empty (the default): no remote
        Spark kernels are offered.""",
    )
    auth = Enum(
        ["None", "Basic_Access", "Kerberos"],
        default_value="None",
        config=True,
        help="""How sparkmagic authenticates to Livy: `None`, `Basic_Access` (a user name and
        password) or `Kerberos` (the server's ticket, from `kinit`).""",
    )
    session_configs = Dict(
        config=True,
        help="""Livy session settings ops set for every student (the body of Livy's
        `POST /sessions`): `driverMemory`, `executorMemory`, `executorCores`, `numExecutors`,
        `queue`, `proxyUser`, `conf` (a dict of `spark.*` settings) ... A student's
        `%%configure` adds to these and may change a key, but never drops ops' other keys.
        Unknown keys are an error.""",
    )

    kernel_python = Unicode(
        "",
        config=True,
        help="""Python interpreter of the environment that has sparkmagic, e.g.
        `/opt/sparkmagic/bin/python` (`install.sh` makes `.venv-livy/bin/python`); sparkmagic's
        kernels run with it. sparkmagic 0.23 needs pandas < 3, so it cannot share ScaleLab's
        environment. Empty (the default): the single-user server's own Python.""",
    )

    @validate("session_configs")
    def _known_fields(self, proposal: Any) -> dict:
        return check_session_configs(proposal["value"])

    @validate("url")
    def _http_url(self, proposal: Any) -> str:
        url = proposal["value"].strip()
        if url and not url.startswith(("http://", "https://")):
            raise TraitError(
                f"c.LivySettings.url must be an http:// or https:// URL, not {url!r}; "
                "e.g. http://livy.cluster:8998"
            )
        return url


def check_session_configs(value: Mapping[str, Any]) -> dict:
    """Livy session settings, checked (pure).

    Raises
    ------
    traitlets.TraitError
        A key that is not a field of Livy's ``POST /sessions``, or ``conf`` that is not a dict
        of strings; the message names the key and the valid fields.
    """
    unknown = sorted(set(value) - LIVY_SESSION_FIELDS)
    if unknown:
        raise TraitError(
            f"c.LivySettings.session_configs has unknown key(s) {unknown}; Livy's session "
            f"fields are {sorted(LIVY_SESSION_FIELDS)}"
        )
    conf = value.get("conf", {})
    if not isinstance(conf, Mapping) or not all(isinstance(k, str) for k in conf):
        raise TraitError(
            "c.LivySettings.session_configs['conf'] must be a dict of Spark settings, "
            "e.g. {'spark.executor.memoryOverhead': '1g'}"
        )
    return dict(value)


def sparkmagic_config(settings: LivySettings) -> dict[str, Any]:
    """sparkmagic's ``config.json`` for a Livy server (pure).

    Returns
    -------
    dict
        ``kernel_python_credentials`` and ``kernel_scala_credentials`` (URL and auth),
        ``session_configs_defaults`` (ops' settings, kept under ``%%configure``),
        ``session_configs`` (the same; the key a student's ``%%configure`` replaces),
        ``livy_server_heartbeat_timeout_seconds`` (ops' ``heartbeatTimeoutInSecond``, else
        900: sparkmagic writes this into every session body, over any
        ``heartbeatTimeoutInSecond`` in the session settings, so an abandoned session ends on
        the cluster), and
        ``fatal_error_suggestion``: what a student reads under a cell when no session could
        be had (Livy down, a wrong URL, a refused setting), naming the Livy URL and the hub
        setting.

    Raises
    ------
    ValueError
        ``settings.url`` is empty.
    """
    if not settings.url:
        raise ValueError("no Livy server configured: set c.LivySettings.url")
    credentials = {"url": settings.url, "auth": settings.auth}
    defaults = copy.deepcopy(settings.session_configs)
    heartbeat_s = int(defaults.pop("heartbeatTimeoutInSecond", 900))
    return {
        "kernel_python_credentials": dict(credentials),
        "kernel_scala_credentials": dict(credentials),
        "session_configs_defaults": defaults,
        "session_configs": copy.deepcopy(defaults),
        "livy_server_heartbeat_timeout_seconds": heartbeat_s,
        "fatal_error_suggestion": fatal_error_text(settings.url),
        "wait_for_idle_timeout_seconds": 15,
        "livy_session_startup_timeout_seconds": 120,
    }


def fatal_error_text(url: str) -> str:
    """sparkmagic's ``fatal_error_suggestion`` for a Livy at ``url`` (pure): a template with one
    ``{}``, which sparkmagic fills with the error."""
    safe_url = url.replace("{", "{{").replace("}", "}}")
    return (
        "The remote Spark session could not be used:\n\t{}.\n\n"
        f"The Livy server is {safe_url} (c.LivySettings.url in the hub's configuration). "
        "If it is not answering, or refuses the session settings, tell your course's ops; "
        "then restart the kernel (Kernel > Restart Kernel) to try again."
    )


def effective_session(
    defaults: Mapping[str, Any], configured: Mapping[str, Any], heartbeat_s: int | None = None
) -> dict:
    """The Livy session body a student gets after ``%%configure`` (pure).

    ``configured`` (the ``%%configure`` cell) over ``defaults`` (ops' settings), one level deep
    for ``conf``: a student may change ``conf["spark.executor.memory"]`` and keeps ops' other
    ``conf`` entries. ``heartbeat_s``, when given, is sparkmagic's
    ``livy_server_heartbeat_timeout_seconds``, which sparkmagic sets as
    ``heartbeatTimeoutInSecond`` over both (and removes when it is 0). sparkmagic also adds
    ``kind`` (``pyspark`` or ``spark``), which a caller passes in ``configured``.
    """
    merged = {**copy.deepcopy(dict(defaults)), **copy.deepcopy(dict(configured))}
    if "conf" in defaults or "conf" in configured:
        merged["conf"] = {**defaults.get("conf", {}), **configured.get("conf", {})}
    if heartbeat_s is not None:
        merged.pop("heartbeatTimeoutInSecond", None)
        if heartbeat_s > 0:
            merged["heartbeatTimeoutInSecond"] = heartbeat_s
    return merged


def sparkmagic_kernelspecs(python: str = "python") -> dict[str, dict[str, Any]]:
    """``kernel.json`` of sparkmagic's remote kernels, by kernelspec name (pure).

    ``python`` is ``argv[0]``: the interpreter that has sparkmagic (``"python"``: the server's
    own, which jupyter_client substitutes).

    Returns
    -------
    dict
        ``{"sparkmagic-pyspark": {...}, "sparkmagic-spark": {...}}``, each with ``argv``,
        ``display_name``, ``language``, ``interrupt_mode`` and ``metadata`` as in Jupyter's
        kernelspec format.
    """
    return {
        name: {
            "argv": [python, "-m", module, "-f", "{connection_file}"],
            "display_name": display,
            "language": language,
            "interrupt_mode": "signal",
            "env": {},
            "metadata": {"scalelab": {"flavour": "livy"}},
        }
        for name, (display, module, language) in SPARKMAGIC_KERNELS.items()
    }


def write_sparkmagic_config(settings: LivySettings, conf_dir: str | Path) -> Path:
    """Write ``config.json`` for sparkmagic into ``conf_dir`` (its ``SPARKMAGIC_CONF_DIR``).

    Returns
    -------
    Path
        The file written (replaced atomically when present).
    """
    folder = Path(conf_dir)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "config.json"
    write_atomic(target, json.dumps(sparkmagic_config(settings), indent=1, sort_keys=True) + "\n")
    return target


def livy_environment(settings: LivySettings) -> dict[str, str]:
    """The single-user server's environment for Livy (pure): ``SCALELAB_LIVY`` or nothing.

    Returns
    -------
    dict
        ``{"SCALELAB_LIVY": '{"url": ..., "auth": ..., "session_configs": ...,
        "kernel_python": ...}'}`` when
        ``settings.url`` is set, else ``{}``.
    """
    if not settings.url:
        return {}
    body = {
        "url": settings.url,
        "auth": settings.auth,
        "session_configs": settings.session_configs,
        "kernel_python": settings.kernel_python,
    }
    return {envvars.LIVY: json.dumps(body, sort_keys=True)}


def settings_from_environment(environ: Mapping[str, str]) -> LivySettings | None:
    """The :class:`LivySettings` a server got from the hub (``SCALELAB_LIVY``), or None.

    Raises
    ------
    traitlets.TraitError, ValueError
        The variable holds no valid settings (not JSON, unknown keys).
    """
    raw = environ.get(envvars.LIVY)
    if not raw:
        return None
    return LivySettings(**json.loads(raw))


def prepare_server(settings: LivySettings, state_dir: str | Path) -> tuple[Path, Path]:
    """Write sparkmagic's ``config.json`` and its kernelspecs under ``state_dir`` (I/O).

    Returns
    -------
    tuple of Path
        ``(sparkmagic conf dir, kernels dir)``: the first is ``SPARKMAGIC_CONF_DIR`` for the
        kernels, the second a folder of ``<name>/kernel.json`` for the kernelspec manager.
    """
    conf_dir = Path(state_dir) / "sparkmagic"
    write_sparkmagic_config(settings, conf_dir)
    kernels_dir = Path(state_dir) / "kernels"
    for name, spec in sparkmagic_kernelspecs(settings.kernel_python or "python").items():
        (kernels_dir / name).mkdir(parents=True, exist_ok=True)
        (kernels_dir / name / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    return conf_dir, kernels_dir


_HAS_SPARKMAGIC = (
    "import importlib.util, sys; sys.exit(importlib.util.find_spec('sparkmagic') is None)"
)


def sparkmagic_problem(kernel_python: str) -> str | None:
    """Why sparkmagic's kernels cannot run with ``kernel_python`` ("": this Python), or None.

    Runs ``kernel_python`` once (a second at most) to look for sparkmagic in its environment.

    Returns
    -------
    str or None
        A message naming the interpreter and the fix, e.g. "sparkmagic is not installed in
        /opt/sparkmagic/bin/python's environment: ...".
    """
    import importlib.util
    import subprocess
    import sys

    fix = (
        "install sparkmagic==0.23.0 into an environment of its own (install.sh makes "
        ".venv-livy) and set c.LivySettings.kernel_python to its bin/python"
    )
    if not kernel_python:
        if importlib.util.find_spec("sparkmagic") is None:
            return f"sparkmagic is not installed in this server's Python ({sys.executable}): {fix}"
        return None
    try:
        found = subprocess.run([kernel_python, "-c", _HAS_SPARKMAGIC], timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"c.LivySettings.kernel_python = {kernel_python!r} cannot run ({exc}): {fix}"
    if found.returncode != 0:
        return f"sparkmagic is not installed in {kernel_python}'s environment: {fix}"
    return None


def setup(serverapp: Any) -> list[str]:
    """Offer sparkmagic's kernels in a single-user server when the hub configured Livy.

    Called by the server extension. Writes sparkmagic's configuration, points
    ``SPARKMAGIC_CONF_DIR`` at it (kernels inherit the server's environment), and adds the
    kernelspecs to the server's kernelspec manager and its allow-list. Without sparkmagic
    where ``c.LivySettings.kernel_python`` points it logs how to install it and offers nothing.

    Returns
    -------
    list of str
        The kernelspec names added.
    """
    import os

    settings = settings_from_environment(os.environ)
    if settings is None:
        return []
    problem = sparkmagic_problem(settings.kernel_python)
    if problem:
        serverapp.log.error(
            "ScaleLab: the hub configured Livy (c.LivySettings.url = %s) but %s",
            settings.url,
            problem,
        )
        return []
    home = os.environ.get("HOME") or os.path.expanduser("~")
    conf_dir, kernels_dir = prepare_server(settings, Path(home) / ".scalelab")
    os.environ["SPARKMAGIC_CONF_DIR"] = str(conf_dir)
    ksm = serverapp.kernel_spec_manager
    ksm.kernel_dirs = [*ksm.kernel_dirs, str(kernels_dir)]
    names = list(SPARKMAGIC_KERNELS)
    if ksm.allowed_kernelspecs:
        ksm.allowed_kernelspecs = {*ksm.allowed_kernelspecs, *names}
    return names
