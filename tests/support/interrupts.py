"""A Ctrl-C in the middle of an upload, for the fetch tests of each kind of store."""

from __future__ import annotations

from typing import Any

import pytest


def interrupt_at_upload(store: Any, monkeypatch: pytest.MonkeyPatch, at: int = 2) -> list[str]:
    """Make ``store``'s ``at``-th ``put_file`` raise ``KeyboardInterrupt`` (what Ctrl-C raises)
    instead of uploading; the earlier ones upload. Returns the list of the remote paths asked
    for, filled as the calls come; ``monkeypatch.undo()`` or setting ``put_file`` back ends it."""
    real_put_file = store.put_file
    uploads: list[str] = []

    def put_file_then_interrupt(lpath: str, rpath: str, **kwargs: Any) -> None:
        uploads.append(rpath)
        if len(uploads) == at:
            raise KeyboardInterrupt
        real_put_file(lpath, rpath, **kwargs)

    monkeypatch.setattr(store, "put_file", put_file_then_interrupt)
    return uploads
