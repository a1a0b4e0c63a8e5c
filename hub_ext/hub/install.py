"""``scalelab.configure(c)``: ScaleLab installed into a JupyterHub configuration, in one call.

The one way in, for ``scalelab up``'s generated configuration and an operator's own
``jupyterhub_config.py`` alike, called last. It runs inside the hub process, and in
``scalelab up`` and ``scalelab doctor``, which check a configuration before any hub starts.
"""

from __future__ import annotations

import sys
from typing import Any

from traitlets.config import Config

from scalelab.hub_ext.hub.config_check import (
    ConfigProblem,
    is_course_spawner,
    spawner_class_of,
    validate_hub_config,
)

#: Whether the hub-start work (GPU inventory, restart of the saved queue) is scheduled already:
#: ``configure`` may run twice in one hub (an operator's file loaded by ``scalelab up``'s).
_hub_start_scheduled = False


def _extend(section: Any, key: str, items: list, same: Any = None) -> None:
    """Append ``items`` to the list setting ``section[key]``, skipping those already there
    (compared by ``same(item)``, default the item itself)."""
    same = same or (lambda item: item)
    current = list(section[key]) if key in section else []
    seen = {same(item) for item in current}
    section[key] = current + [item for item in items if same(item) not in seen]


def _running_hub() -> Any:
    """The JupyterHub application whose configuration is being read, or None (a check from
    ``scalelab up`` or ``doctor``, a test)."""
    if "jupyterhub.app" not in sys.modules:
        return None
    from jupyterhub.app import JupyterHub

    return JupyterHub.instance() if JupyterHub.initialized() else None


def configure(c: Config) -> Config:
    """Install ScaleLab into the hub configuration ``c`` (changed in place); call it last in
    ``jupyterhub_config.py``, after every other setting. Safe to call twice.

    What it does:

    - ``c.JupyterHub.spawner_class = "scalelab"`` (:class:`~scalelab.spawner.ScaleLabSpawner`)
      unless the file chose a spawner class;
    - ScaleLab's templates folder (login, spawn form, pending page, ops pages) appended to
      ``c.JupyterHub.template_paths``, after the operator's own folders;
    - the GPU board (``/hub/scalelab/gpus``, ``/hub/api/scalelab/gpus``), the servers' GPU
      reports (``/hub/api/scalelab/users/<user>/gpu-readings``), the Spark applications'
      executor GPUs (``/hub/api/scalelab/users/<user>/spark-gpus``), the hand-in API
      (``/hub/api/scalelab/users/<user>/submissions``), the instructors' view of the hand-ins
      (``/hub/scalelab/submissions``), the feedback API
      (``/hub/api/scalelab/users/<user>/feedback``) and the ops' server-log pages
      (``/hub/scalelab/logs/...``) added to ``c.JupyterHub.extra_handlers``;
    - with ``c.DirectoryGroups`` set, the directory's groups and admins applied at every login
      (:func:`configure_directory`);
    - the idle culler and the GPU monitor as hub services, with their roles
      (``c.ScaleLabCulling``, :func:`scalelab.hub_ext.services.culling.configure_culling`);
    - every ScaleLab setting checked, as ``scalelab up`` and ``scalelab doctor`` check it
      (:func:`~scalelab.hub_ext.hub.config_check.validate_hub_config`): misspelt names, bad
      values, profiles, declared GPUs;
    - in a starting hub, the GPU inventory built at start and the GPU queue saved before a
      restart started again (:func:`scalelab.spawner.hubstart.start_with_hub`), and the server
      API's PATCH made to answer an unknown field or bad server options with a 400, not
      JupyterHub's 500 (:func:`scalelab.hub_ext.hub.server_patch.mount`).

    Returns
    -------
    traitlets.config.Config
        ``c`` itself.

    Raises
    ------
    ConfigProblem
        A setting is not valid (the message names it, ``fix`` says what to change). In a
        starting JupyterHub the problem and its fix are logged instead as one critical line and
        the hub exits with status 1, without a traceback.
    """
    from scalelab.common.access_log import quiet_service_requests
    from scalelab.hub_ext.hub import (
        feedback,
        gpu_board,
        gpu_reports,
        server_logs,
        spark_gpus,
        submissions,
        submissions_page,
    )
    from scalelab.hub_ext.services.culling import configure_culling
    from scalelab.spawner.health_metrics import register_health
    from scalelab.spawner.validation import spawner_settings
    from scalelab.templates import templates_dir

    hub = c.JupyterHub
    if "spawner_class" not in hub:
        hub.spawner_class = "scalelab"
    _extend(hub, "template_paths", [str(templates_dir())], same=str)
    routes = [
        *gpu_board.handlers(),
        *gpu_reports.handlers(),
        *spark_gpus.handlers(),
        *server_logs.handlers(),
        *submissions.handlers(),
        *feedback.handlers(),
        *submissions_page.handlers(),
    ]
    _extend(hub, "extra_handlers", routes, same=lambda route: route[0])
    app = _running_hub()
    source = getattr(app, "config_file", "") or "your config file"
    try:
        validate_hub_config(c, source)
        configure_directory(c)  # the directory's groups and admins, at every login
    except ConfigProblem as exc:
        if app is None:
            raise
        app.log.critical("ScaleLab cannot start: %s. %s", exc, exc.fix)
        raise SystemExit(1) from None
    configure_culling(c)
    spawner_class = spawner_class_of(c)
    if app is not None and not is_course_spawner(spawner_class):
        app.log.warning(
            "ScaleLab: c.JupyterHub.spawner_class %s.%s has no course layer: its servers get no "
            "course store, Spark settings, kernel allow-list or GPUs. Put "
            "scalelab.spawner.course.CourseSpawnerMixin first among its bases for those.",
            spawner_class.__module__,
            spawner_class.__name__,
        )
    if app is not None:
        quiet_service_requests()  # the monitor's and culler's polls at debug level
        register_health(app, spawner_settings(c, spawner_class))  # store, YARN, memory gauges
    global _hub_start_scheduled
    if app is not None and not _hub_start_scheduled:
        from scalelab.hub_ext.hub import server_patch
        from scalelab.spawner.hubstart import start_with_hub

        _hub_start_scheduled = start_with_hub()
        if _hub_start_scheduled:
            server_patch.mount(app)
    return c


def configure_directory(c: Config) -> None:
    """With ``c.DirectoryGroups.group_map`` or ``admin_groups`` set: install the directory's
    login hook (:func:`scalelab.hub_ext.hub.directory.post_auth_hook`) and
    ``c.Authenticator.manage_groups = True``: JupyterHub then sets each user's groups at every
    login (a membership added by hand lasts until the member's next login).

    Raises
    ------
    ConfigProblem
        ``c.Authenticator.post_auth_hook`` is another function.
    """
    from scalelab.hub_ext.hub.directory import DirectoryGroups, post_auth_hook

    if not DirectoryGroups(config=c).active:
        return
    hook = c.Authenticator.get("post_auth_hook")
    if hook is not None and hook is not post_auth_hook:
        raise ConfigProblem(
            "c.Authenticator.post_auth_hook is set and c.DirectoryGroups too: only one hook runs",
            "Call scalelab.hub_ext.hub.directory.post_auth_hook(authenticator, handler, "
            "authentication) at the end of your own hook, and return what it returns.",
        )
    c.Authenticator.post_auth_hook = post_auth_hook
    c.Authenticator.manage_groups = True
