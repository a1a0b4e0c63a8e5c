"""The committed configuration reference is what the traits' help text generates."""

from __future__ import annotations

import ast
from pathlib import Path

from scalelab.cli import main
from scalelab.commands.config_reference import reference_text
from scalelab.common.config_registry import CONFIG_CLASSES

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "config-reference.md"


def test_committed_reference_is_up_to_date():
    assert REFERENCE.read_text() == reference_text(), (
        "docs/config-reference.md is stale: regenerate it with "
        "`.venv/bin/scalelab config-reference > docs/config-reference.md`"
    )


def test_reference_lists_every_scalelab_setting_with_its_help(capsys):
    assert main(["config-reference"]) == 0
    text = capsys.readouterr().out
    for setting in (
        "c.ScaleLabSpawner.store_url",
        "c.ScaleLabSpawner.server_log_dir",
        "c.GPUPolicy.max_gpus_per_user",
        "c.ScaleLabCulling.gpu_idle_timeout",
        "c.ScaleLabSpawner.gpu_source_class",
        "c.LivySettings.url",
        "c.StoreDrive.enabled",
    ):
        assert f"| `{setting}` |" in text
    assert "c.ScaleLabSpawner.cmd" not in text  # JupyterHub's own settings are JupyterHub's
    assert "fake" not in text.lower()  # test-only sources live in tests/, not in the reference
    assert "| `c.ScaleLabCulling.idle_timeout` | Int | `3600` | Seconds without activity" in text
    # A class's own @default is its default: the local spawner starts 20 at once, Kubernetes
    # keeps the trait's 0 (the generator read only the trait's static value, 0 for both).
    assert "| `c.ScaleLabSpawner.concurrent_starts` | Int | `20` |" in text
    assert "| `c.ScaleLabKubeSpawner.concurrent_starts` | Int | `0` |" in text


def test_every_configurable_class_in_production_code_is_registered():
    """A class that defines a setting (``config=True``) is in the registry, or is a mixin that
    a registered class carries: else the reference and the hub's check would miss it."""
    registered = {e.name for e in CONFIG_CLASSES} | {m for e in CONFIG_CLASSES for m in e.includes}
    found = {}
    for folder in ("scalelab", "hub_ext", "spawner", "kernels", "store"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef) or "config=True" not in ast.unparse(node):
                    continue
                # nbconvert preprocessors: `scalelab labs release` makes them itself, no config
                if any(ast.unparse(base) == "Preprocessor" for base in node.bases):
                    continue
                found[node.name] = path.relative_to(ROOT)
    assert {"ScaleLabCulling", "GPUPolicy", "CourseSpawnerMixin"} <= set(found)
    assert {name: str(path) for name, path in found.items() if name not in registered} == {}
