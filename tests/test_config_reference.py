"""The committed configuration reference is what the traits' help text generates."""

from __future__ import annotations

from pathlib import Path

from scalelab.cli import main
from scalelab.commands.config_reference import reference_text

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "config-reference.md"


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
        "c.ScaleLabCulling.fake_utilization_file",
    ):
        assert f"| `{setting}` |" in text
    assert "c.ScaleLabSpawner.cmd" not in text  # JupyterHub's own settings are JupyterHub's
    assert "| `c.ScaleLabCulling.idle_timeout` | Int | `3600` | Seconds without activity" in text
