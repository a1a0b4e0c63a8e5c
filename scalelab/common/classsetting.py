"""A configuration value that names a class: a class, or its import path (pure, no I/O)."""

from __future__ import annotations

from typing import Any, TypeVar

from traitlets.utils.importstring import import_item

T = TypeVar("T")


def configured_class(value: Any, base: type[T], where: str, hint: str = "") -> type[T] | None:
    """The class that ``value`` (a class or an import path such as ``"pkg.mod.Name"``) names.

    Parameters
    ----------
    value
        The setting's value; None when unset.
    base
        The class it must be (a subclass of).
    where
        The setting's name for messages, e.g. ``"c.ScaleLabSpawner.gpu_source_class"``.
    hint
        Appended to the "is not a ..." message (``"; use ..."``).

    Returns
    -------
    type or None
        The class; None when ``value`` is None.

    Raises
    ------
    ValueError
        It cannot be imported, or is not a subclass of ``base``; the message names ``where``.
    """
    if value is None:
        return None
    try:
        cls = import_item(value) if isinstance(value, str) else value
    except (ImportError, ValueError) as exc:
        raise ValueError(f"{where} = {value!r} cannot be imported: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{where} = {value!r} is not a {base.__module__}.{base.__name__}{hint}")
    return cls
