"""Configuration sections that refuse misspelt settings, with one message format.

:class:`StrictConfigurable` refuses an unknown name in ``c.<Class>`` when the object is made,
:func:`check_section` in a section read before any object exists (the hub's start-up check);
the message names each unknown setting and the nearest real one.
Why: docs/design-notes.md, scalelab.common.strictconfig.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from traitlets import TraitError
from traitlets.config import Configurable


class UnknownSettingError(TraitError, ValueError):
    """A configuration section names a setting its class does not have (also a ``ValueError``,
    for callers that catch configuration errors by that)."""


def unknown_settings_message(where: str, given: Iterable[str], known: Iterable[str]) -> str | None:
    """``"<where> has unknown setting(s) [...] (did you mean ...?)"``, or None when every name
    in ``given`` is in ``known`` (pure).

    Parameters
    ----------
    where
        How the section is written in a config file, e.g. ``"c.GPUPolicy"``.
    given, known
        The names set in the section, and the names the class accepts.
    """
    known = set(known)
    unknown = sorted(set(given) - known)
    if not unknown:
        return None
    hints = [
        f"{key!r} -> {close[0]!r}"
        for key in unknown
        if (close := difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6))
    ]
    hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
    return f"{where} has unknown setting(s) {unknown}{hint}"


def check_section(config: Mapping[str, Any], cls: type[Configurable], name: str = "") -> None:
    """Refuse names in ``config[<name>]`` that ``cls`` has no configurable trait for.

    Parameters
    ----------
    config
        A traitlets ``Config`` (or any mapping of section name -> settings).
    cls
        The class the section configures.
    name
        The section's name; default ``cls.__name__``.

    Raises
    ------
    UnknownSettingError
        As :func:`unknown_settings_message` says.
    """
    name = name or cls.__name__
    if name not in config:
        return
    message = unknown_settings_message(
        f"c.{name}", config[name], cls.class_trait_names(config=True)
    )
    if message:
        raise UnknownSettingError(message)


class StrictConfigurable(Configurable):
    """A ``Configurable`` whose own section (``c.<ClassName>``) refuses misspelt settings.

    Raises
    ------
    UnknownSettingError
        When made with a config whose section names a setting the class does not have.
    """

    def __init__(self, **kwargs: Any) -> None:
        with warnings.catch_warnings():  # traitlets only warns of unknown settings; we refuse them
            warnings.filterwarnings("ignore", "Config option .* not recognized", UserWarning)
            super().__init__(**kwargs)
        check_section(self.config, type(self))
