"""The hub configuration checked up front: the operator's file compiles, loads and validates.

``scalelab up --config FILE`` and ``scalelab doctor --config FILE`` both call
:func:`check_hub_config`, so a misspelt ScaleLab setting, a bad value or a Python syntax error
in ``FILE`` is one clear message (and its fix) before the hub starts, instead of a hub log
traceback. The validation itself is the one the generated ``jupyterhub_config.py`` runs when
the hub starts (:func:`scalelab.spawner.gpu_spawner.validate_config` and
:func:`scalelab.hub_ext.services.culling.configure_culling`); this module only calls it earlier.
"""

from __future__ import annotations

import copy
import difflib
import traceback
from pathlib import Path

from traitlets.config import Config


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


def validate_hub_config(c: Config, source: str = "your config file") -> None:
    """Run the validation the hub runs at start on ``c`` (not changed).

    Raises
    ------
    ConfigProblem
        A misspelt ``GPUPolicy``/``ScaleLabCulling``/``ScaleLabSpawner``/``LivySettings``
        setting or key, a bad value, profile, declared GPU, memory size or Livy session field;
        the message names it (traitlets' or ScaleLab's words).
    """
    from scalelab.hub_ext.services.culling import configure_culling
    from scalelab.kernels.livy import LivySettings
    from scalelab.spawner.gpu_spawner import validate_config
    from scalelab.spawner.local import ScaleLabSpawner

    try:
        validate_config(c)
        configure_culling(copy.deepcopy(c))  # it adds services to the config it is given
        check_section_keys(c, ScaleLabSpawner)
        check_section_keys(c, LivySettings)
        LivySettings(config=c)  # its values (session_configs) are checked when it is made
    except Exception as exc:  # noqa: BLE001 -- traitlets raises TraitError, ours ValueError
        raise ConfigProblem(
            f"the configuration is not valid: {exc}",
            f"Correct that setting in {source}; `scalelab config-reference` lists every "
            "setting with its type.",
        ) from None


def check_section_keys(c: Config, cls: type) -> None:
    """Raise ``ValueError`` naming each key of ``c.<cls name>`` that ``cls`` has no setting for.

    traitlets only warns about those (and the hub starts with the setting ignored); ScaleLab's
    sections refuse them. The message suggests the nearest setting name, e.g.
    ``c.ScaleLabSpawner has unknown setting(s) ['store_ulr'] (did you mean 'store_url'?)``.
    """
    name = cls.__name__
    if name not in c:
        return
    known = set(cls.class_trait_names(config=True))
    unknown = sorted(set(c[name]) - known)
    if not unknown:
        return
    hints = [
        f"{key!r} -> {close[0]!r}"
        for key in unknown
        if (close := difflib.get_close_matches(key, known, n=1, cutoff=0.6))
    ]
    hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
    raise ValueError(f"c.{name} has unknown setting(s) {unknown}{hint}")


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
