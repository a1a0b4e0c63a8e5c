"""A full home under ScaleLab's server extension: the parts that need no running server. The
rest runs on a real single-user server in ``tests/integration/hub/test_full_disk.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

from traitlets.config import Config

from scalelab.hub_ext.server.extension import notary_config


def test_an_empty_signing_key_is_made_anew(tmp_path: Path):
    key = tmp_path / "notebook_secret"
    key.write_bytes(b"")  # as nbformat 5.11 leaves it when the disk fills while writing it
    app = SimpleNamespace(config=Config(), data_dir=str(tmp_path), log=logging.getLogger("t"))
    settings = notary_config(app)["NotebookNotary"]
    assert len(settings["secret"]) > 1000 and key.read_bytes() == settings["secret"]
    assert key.stat().st_mode & 0o777 == 0o600
    assert settings["store_factory"]().db_file == str(tmp_path / "nbsignatures.db")
    assert notary_config(app)["NotebookNotary"]["secret"] == settings["secret"]  # kept


def test_the_operators_notary_settings_are_kept(tmp_path: Path):
    config = Config()
    config.NotebookNotary.secret = b"ops-secret"
    config.NotebookNotary.db_file = ":memory:"
    app = SimpleNamespace(config=config, data_dir=str(tmp_path), log=logging.getLogger("t"))
    settings = notary_config(app)["NotebookNotary"]
    assert "secret" not in settings and settings["store_factory"]().db_file == ":memory:"
    assert list(tmp_path.iterdir()) == []
