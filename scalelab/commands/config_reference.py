"""The configuration reference (Markdown), generated from the help text of ScaleLab's traits.

``scalelab config-reference`` prints it; ``docs/config-reference.md`` is its committed output,
which a test keeps up to date. Only settings that ScaleLab defines are listed (a
``ScaleLabSpawner`` also takes every ``LocalProcessSpawner`` and ``Spawner`` setting, which
JupyterHub documents).
"""

from __future__ import annotations

import inspect
import textwrap

from traitlets import HasTraits, TraitType


def _classes() -> list[type[HasTraits]]:
    from scalelab.hub_ext.server.store_drive import StoreDrive
    from scalelab.hub_ext.services.culling import ScaleLabCulling
    from scalelab.kernels.livy import LivySettings
    from scalelab.spawner.local import ScaleLabSpawner
    from scalelab.spawner.policy import GPUPolicy

    return [ScaleLabSpawner, GPUPolicy, ScaleLabCulling, LivySettings, StoreDrive]


def _own(cls: type[HasTraits]) -> dict[str, TraitType]:
    """Configurable traits of ``cls`` defined by a ScaleLab class (not by JupyterHub's)."""
    traits = cls.class_traits(config=True)
    return {
        name: trait
        for name, trait in sorted(traits.items())
        if trait.this_class is not None and trait.this_class.__module__.startswith("scalelab.")
    }


def _default(trait: TraitType) -> str:
    try:
        value = trait.default()
    except Exception:  # noqa: BLE001 -- dynamic defaults need an instance
        return "(computed)"
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
        "Set these in `jupyterhub_config.py` (with `scalelab up`: the file given to `--config`).",
        "A misspelt `GPUPolicy` or `ScaleLabCulling` setting stops the hub with its name.",
    ]
    for cls in _classes():
        doc = textwrap.dedent(cls.__doc__ or "").strip().split("\n\n")[0]
        parts += ["", f"## {cls.__name__}", "", " ".join(doc.split()), ""]
        parts += ["| setting | type | default | meaning |", "| --- | --- | --- | --- |"]
        for name, trait in _own(cls).items():
            parts.append(
                f"| `c.{cls.__name__}.{name}` | {type(trait).__name__} | "
                f"`{_default(trait)}` | {_help(trait)} |"
            )
    return "\n".join(parts) + "\n"
