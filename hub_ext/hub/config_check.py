"""The hub configuration checked up front: the operator's file compiles, loads and validates.

:func:`check_hub_config` (called by ``scalelab up --config`` and ``scalelab doctor --config``)
runs :func:`validate_hub_config`, the check :func:`scalelab.configure` runs in the hub, earlier,
on the sections of :data:`scalelab.common.config_registry.CONFIG_CLASSES`.
Why: docs/design-notes.md, scalelab.hub_ext.hub.config_check.
"""

from __future__ import annotations

import copy
import traceback
from pathlib import Path

from traitlets.config import Config

from scalelab.common.strictconfig import check_section


class ConfigProblem(Exception):
    """The configuration cannot be used: ``str(exc)`` says what is wrong, :attr:`fix` what to do.

    Attributes
    ----------
    message
        What is wrong, naming the file and line, or the setting (one line).
    fix
        What to change.
    """

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


def compile_config_file(path: str | Path) -> None:
    """Compile (do not run) the Python config file ``path``.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist or is not a file.
    ConfigProblem
        It cannot be read, or has a Python syntax error; the message is Python's, with the file
        name and line, e.g. ``'(' was never closed (mine.py, line 1)``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"the config file {path} does not exist")
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise ConfigProblem(
            f"cannot read the configuration: {path}: {exc.strerror or exc}",
            f"Make {path} readable by this user.",
        ) from None
    try:
        compile(source, str(path), "exec")
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte in the file
        where = f" at line {exc.lineno}" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise ConfigProblem(
            f"cannot read the configuration: {exc}",
            f"Correct the Python syntax{where} of {path}.",
        ) from None


def load_config_file(path: str | Path) -> Config:
    """The settings of the Python config file ``path``, compiled first, then run as JupyterHub
    runs it (traitlets' ``PyFileConfigLoader``: ``c``, ``get_config()``, ``load_subconfig()``).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ConfigProblem
        A syntax error, or an exception while the file runs (named with its line).
    """
    from traitlets.config.loader import PyFileConfigLoader

    compile_config_file(path)
    path = Path(path).resolve()
    try:
        return PyFileConfigLoader(path.name, str(path.parent)).load_config()
    except ConfigProblem:
        raise
    except Exception as exc:  # noqa: BLE001 -- the operator's code may raise anything
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
        where = f"{path.name}, line {frames[-1].lineno}" if frames else path.name
        raise ConfigProblem(
            f"cannot read the configuration: {type(exc).__name__}: {exc} ({where})",
            f"Correct {path} at that line; it must run as plain Python.",
        ) from None


def spawner_class_of(c: Config) -> type:
    """The spawner class ``c`` configures: ``c.JupyterHub.spawner_class`` as JupyterHub resolves
    it (an entry point name such as ``"scalelab"``, an import string, or a class); default
    ``"scalelab"``, which :func:`scalelab.configure` sets.

    Raises
    ------
    ConfigProblem
        It cannot be loaded (a misspelt name, a module that fails to import).
    """
    from jupyterhub.app import JupyterHub

    value = c.JupyterHub["spawner_class"] if "spawner_class" in c.JupyterHub else "scalelab"
    trait = JupyterHub.class_traits()["spawner_class"]
    try:
        return trait.validate(JupyterHub, value)
    except Exception as exc:  # noqa: BLE001 -- traitlets' TraitError, or the import's own error
        raise ConfigProblem(
            f"c.JupyterHub.spawner_class = {value!r} cannot be loaded: {exc}",
            'Set it to "scalelab" (ScaleLab\'s local-process spawner) or to the import path of '
            "a spawner class that includes scalelab.spawner.course.CourseSpawnerMixin.",
        ) from None


def is_course_spawner(spawner_class: type) -> bool:
    """Whether ``spawner_class`` has ScaleLab's course layer
    (:class:`~scalelab.spawner.course.CourseSpawnerMixin`: store, Spark, kernels, GPUs)."""
    from scalelab.spawner.course import CourseSpawnerMixin

    return issubclass(spawner_class, CourseSpawnerMixin)


def validate_hub_config(c: Config, source: str = "your config file") -> None:
    """Run the validation the hub runs at start on ``c`` (not changed).

    It checks the spawner's settings (GPU profiles, declared GPUs, memory sizes, and every
    setting's name), then each hub section of
    :data:`scalelab.common.config_registry.CONFIG_CLASSES` (names and values).

    Raises
    ------
    ConfigProblem
        A misspelt setting or key, a bad value, profile, declared GPU, memory size or Livy
        session field; the message names it (traitlets' or ScaleLab's words), the fix says
        where to correct it.
    """
    from scalelab.common.config_registry import hub_classes
    from scalelab.hub_ext.services.culling import configure_culling
    from scalelab.spawner.validation import validate_spawner_config

    spawner_class = spawner_class_of(c)
    try:
        if is_course_spawner(spawner_class):  # else servers are not course servers: see configure
            validate_spawner_config(c, spawner_class)
        for entry in hub_classes():
            if entry.includes:  # the spawner's section: checked with the spawner class above
                continue
            cls = entry.load()
            check_section(c, cls)
            if entry.name == "ScaleLabCulling":
                configure_culling(copy.deepcopy(c))  # it adds services to the config it is given
            else:
                cls(config=c)  # values are checked when the object is made
    except Exception as exc:  # noqa: BLE001 -- traitlets raises TraitError, ours ValueError
        raise ConfigProblem(
            f"the configuration is not valid: {exc}",
            f"Correct that setting in {source}; `scalelab config-reference` lists every "
            "setting with its type.",
        ) from None


def check_hub_config(base: Config, operator_config: str | Path | None) -> Config:
    """``base`` with the operator's file merged over it, compiled, loaded and validated.

    Parameters
    ----------
    base
        ScaleLab's defaults (:func:`scalelab.commands.up_config.embedded_config`); not changed.
    operator_config
        The ``jupyterhub_config.py`` given with ``--config``, or None.

    Returns
    -------
    traitlets.config.Config
        The merged configuration, as the hub will see it.

    Raises
    ------
    FileNotFoundError
        ``operator_config`` does not exist.
    ConfigProblem
        As :func:`load_config_file` and :func:`validate_hub_config`.
    """
    merged = copy.deepcopy(base)
    source = "your config file"
    if operator_config:
        merged.merge(load_config_file(operator_config))
        source = str(Path(operator_config))
    validate_hub_config(merged, source)
    return merged
