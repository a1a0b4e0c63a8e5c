"""The configuration reference (Markdown), generated from the help text of ScaleLab's traits.

``scalelab config-reference`` prints it; ``docs/config-reference.md`` is its committed output,
which a test keeps up to date. The classes are those of
:data:`scalelab.common.config_registry.CONFIG_CLASSES`. Only settings that ScaleLab defines are
listed (a ``ScaleLabSpawner`` also takes every ``LocalProcessSpawner`` and ``Spawner`` setting,
which JupyterHub documents).
"""

from __future__ import annotations

import inspect
import textwrap

from traitlets import HasTraits, TraitType

from scalelab.common.config_registry import CONFIG_CLASSES

_WHERE = {
    "hub": "Set in `jupyterhub_config.py`; a misspelt name stops the hub, naming the nearest one.",
    "server": "Set in the single-user servers' `jupyter_server_config.py`.",
}


def _own(cls: type[HasTraits]) -> dict[str, TraitType]:
    """Configurable traits of ``cls`` defined by a ScaleLab class (not by JupyterHub's)."""
    traits = cls.class_traits(config=True)
    return {
        name: trait
        for name, trait in sorted(traits.items())
        if trait.this_class is not None and trait.this_class.__module__.startswith("scalelab.")
    }


def _default(cls: type[HasTraits], name: str, trait: TraitType) -> str:
    """The default ``cls`` gives setting ``name``: its own ``@default`` method's value where it
    has one (the local spawner's ``concurrent_starts`` is 20 where the trait says 0), computed on
    an instance made without configuration; "(computed)" where that needs more."""
    handler = cls._trait_default_generators.get(name)
    try:
        if getattr(handler, "func", None) is not None:  # a @default method
            value = handler.func(cls.__new__(cls))
        else:
            value = trait.default()
    except Exception:  # noqa: BLE001 -- dynamic defaults that need a configured instance
        return "(computed)"
    if isinstance(value, type):  # a Type setting: the class's import path, not its repr
        return f"{value.__module__}.{value.__qualname__}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _help(trait: TraitType) -> str:
    text = inspect.cleandoc(trait.help or "").replace("\n\n", "<br><br>")
    return " ".join(text.split()).replace("|", "\\|")


def reference_text() -> str:
    """The whole reference, as Markdown."""
    parts = [
        "# Configuration reference",
        "",
        "Generated from the traits' help text by `scalelab config-reference`; do not edit.",
        "With `scalelab up`, `jupyterhub_config.py` is the file given to `--config`; in your own",
        "hub, `scalelab.configure(c)` at its end checks every hub section below.",
    ]
    for entry in CONFIG_CLASSES:
        cls = entry.load()
        doc = textwrap.dedent(cls.__doc__ or "").strip().split("\n\n")[0]
        parts += ["", f"## {cls.__name__}", "", " ".join(doc.split()), ""]
        parts += [_WHERE[entry.config_file], ""]
        parts += ["| setting | type | default | meaning |", "| --- | --- | --- | --- |"]
        for name, trait in _own(cls).items():
            parts.append(
                f"| `c.{cls.__name__}.{name}` | {type(trait).__name__} | "
                f"`{_default(cls, name, trait)}` | {_help(trait)} |"
            )
    return "\n".join(parts) + "\n"
