"""The start-up check of a spawner class's ScaleLab settings in a hub configuration.

:func:`validate_spawner_config` runs before the hub starts (``scalelab.configure(c)``,
``scalelab up``, ``scalelab doctor``), so that a misspelt setting or a bad value is one message
naming it, not a setting silently ignored or a failure at the first spawn.
"""

from __future__ import annotations

import difflib
import os
from typing import Any

import fsspec
from jupyterhub.spawner import LocalProcessSpawner
from traitlets import TraitError
from traitlets.config import Config

from scalelab.common.strictconfig import check_section
from scalelab.spawner.course import CourseSpawnerMixin
from scalelab.spawner.gpu_spawner import check_spawn_settings
from scalelab.spawner.local import ScaleLabSpawner
from scalelab.spawner.profiles import check_memory_choices
from scalelab.spawner.store_identity import (
    HDFSUserIdentity,
    S3KeyFile,
    SharedStoreIdentity,
    identity_class,
)
from scalelab.store import protocols


def _scalelab_section(cls: type) -> bool:
    """Whether ``c.<cls name>`` is a ScaleLab section: a ScaleLab class, or an operator's
    subclass of the course layer (not JupyterHub's ``Spawner``, ``LocalProcessSpawner``...)."""
    return cls.__module__.startswith("scalelab.") or issubclass(cls, CourseSpawnerMixin)


def spawner_settings(config: Config, spawner_class: type) -> dict[str, Any]:
    """The settings ``config`` gives ``spawner_class`` (pure): every section of its class
    hierarchy merged as traitlets merges them, a subclass's section winning."""
    merged: dict[str, Any] = {}
    for name in spawner_class.section_names():
        if name in config:
            merged.update(config[name])
    return merged


def validate_spawner_config(config: Config, spawner_class: type | None = None) -> None:
    """Check a spawner class's ScaleLab settings in a hub configuration, before the hub starts.

    Checked: every name set in a ScaleLab section of the class (``c.<Name>`` for each class of
    ``spawner_class.__mro__`` that is ScaleLab's or a subclass of
    :class:`~scalelab.spawner.course.CourseSpawnerMixin`; a name is valid when
    ``spawner_class`` has that setting, JupyterHub's included, so
    ``c.ScaleLabSpawner.start_timeout`` is), ``c.GPUPolicy``, the profiles, the Spark driver
    memory sizes, the declared GPUs, the GPU source class with its own section, and the store
    identity class (``store_identity_class``) with its own section, against ``store_url``
    (``c.S3KeyFile.key_file`` set, an ``s3://`` store for it), the store URL's protocol, and,
    for servers on this machine, ``hadoop_conf_dir``. JupyterHub's own sections
    (``c.Spawner``, ``c.LocalProcessSpawner``) are left to JupyterHub.

    Parameters
    ----------
    config
        The hub configuration (``c`` in ``jupyterhub_config.py``); not changed.
    spawner_class
        The hub's spawner class, a subclass of
        :class:`~scalelab.spawner.course.CourseSpawnerMixin`; None:
        :class:`~scalelab.spawner.local.ScaleLabSpawner`.

    Raises
    ------
    scalelab.common.strictconfig.UnknownSettingError
        A misspelt setting (a ``TraitError`` and a ``ValueError``); the message names it and
        the nearest real one.
    traitlets.TraitError, ValueError
        A value of the wrong type (``spark_driver_memory = 5``), a bad value, profile, memory
        size, declared GPU, GPU source or store identity; the message names it.
    """
    spawner_class = spawner_class or ScaleLabSpawner
    for cls in spawner_class.__mro__:
        if _scalelab_section(cls):
            check_section(config, spawner_class, cls.__name__)
    settings = spawner_settings(config, spawner_class)
    where = f"c.{spawner_class.__name__}"
    check_spawn_settings(config, settings, where)
    check_store_url(str(settings.get("store_url") or ""), where)
    if issubclass(spawner_class, LocalProcessSpawner):  # servers on the hub's machine
        check_hadoop_conf_dir(str(settings.get("hadoop_conf_dir") or ""), where)
    check_store_identity(config, settings, where)
    check_host = getattr(spawner_class, "check_host_settings", None)
    if check_host is not None:  # a backend's own check of the hub's host (Slurm: sudo)
        check_host(settings, where)
    try:  # traitlets checks each configured value against its trait's type when it is made
        spawner_class(config=config)
    except TraitError:
        raise
    except Exception:  # noqa: BLE001 -- a backend that cannot be made without a user or hub:
        pass  # its values are checked by JupyterHub at the first spawn
    memory = settings.get("spark_driver_memory")
    if memory is not None:
        try:
            check_memory_choices([memory])
        except ValueError:
            raise ValueError(
                f"c.{spawner_class.__name__}.spark_driver_memory must be a JVM size like "
                f"'512m' or '2g', not {memory!r}"
            ) from None
    check_spark_conf(settings.get("spark_conf") or {}, where)


#: Spark settings that have a setting of their own in the spawner, not ``spark_conf``.
OWN_SETTINGS = {"spark.master": "spark_master", "spark.driver.memory": "spark_driver_memory"}


def check_spark_conf(conf: dict[str, Any], where: str) -> None:
    """Check ``spark_conf`` (pure): ``spark.*`` keys only, none that has a spawner setting of
    its own (``spark.master``: ``spark_master``; ``spark.driver.memory``:
    ``spark_driver_memory``).

    Raises
    ------
    ValueError
        The first bad key, named with the fix.
    """
    for key in conf:
        if not str(key).startswith("spark."):
            raise ValueError(
                f"{where}.spark_conf: {key!r} is not a Spark setting (they start with 'spark.')"
            )
        if key in OWN_SETTINGS:
            raise ValueError(
                f"{where}.spark_conf: set {key} with {where}.{OWN_SETTINGS[key]}, not in spark_conf"
            )


def check_store_url(store_url: str, where: str) -> None:
    """Check that ``store_url``'s protocol is one fsspec knows (pure but for fsspec's registry
    of protocols; nothing is opened). Empty: the spawner's default.

    Raises
    ------
    ValueError
        An unknown protocol (``hdfss://``), named with the nearest known one.
    """
    if not store_url:
        return
    scheme = protocols.scheme_of(store_url)
    try:
        fsspec.get_filesystem_class(scheme)
    except ValueError:
        known = {
            *fsspec.available_protocols(),
            *(s for p in protocols.registered() for s in p.schemes),
        }
        near = difflib.get_close_matches(scheme, sorted(known), n=1)
        hint = f"did you mean {near[0]}://? " if near else ""
        raise ValueError(
            f"{where}.store_url = {store_url!r} names the protocol {scheme!r}, which fsspec does "
            f"not know: {hint}ScaleLab's stores are file://, hdfs://, webhdfs:// and s3://"
        ) from None
    except ImportError:
        pass  # its package is the servers' concern (scalelab doctor and each kernel check it)


def check_hadoop_conf_dir(folder: str, where: str) -> None:
    """Check that ``hadoop_conf_dir``, where set, is a folder on this machine (for spawners
    whose servers run here).

    Raises
    ------
    ValueError
        It does not exist or is not a folder; the message names the setting.
    """
    if folder and not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ValueError(
            f"{where}.hadoop_conf_dir = {folder!r} {what} on this machine: set it to the folder "
            "of the cluster's core-site.xml, hdfs-site.xml and yarn-site.xml (often "
            "/etc/hadoop/conf), or leave it unset off the cluster"
        )


def check_store_identity(config: Config, settings: dict[str, Any], where: str) -> None:
    """Check the store identity: ScaleLab's identity classes' sections (``c.S3KeyFile``,
    ``c.HDFSUserIdentity``) and the chosen class, made with ``config``, against ``store_url``
    (no I/O: the key file is read when a server starts).

    Raises
    ------
    scalelab.common.strictconfig.UnknownSettingError
        A misspelt setting of an identity class (``c.S3KeyFile.keyfile``).
    ValueError
        ``store_identity_class`` is no identity class, or does not fit ``store_url``, or a
        setting it needs is unset; the message names it.
    """
    for cls in (S3KeyFile, HDFSUserIdentity):
        check_section(config, cls)
    chosen = identity_class(settings.get("store_identity_class"), f"{where}.store_identity_class")
    identity = (chosen or SharedStoreIdentity)(config=config)
    identity.check_settings(str(settings.get("store_url", "")), where)
