"""The course store in a kernel: ``store`` ready in the notebook, or a clear error at first use.

:func:`kernel_store` is what a ScaleLab kernel runs at start (``scalelab.kernels.startup``): the
cheap up-front check (:func:`~scalelab.store.access.check.check_store`), then ``store`` -- the
student's
part of the store (:func:`scalelab.store.access.student.student_store`) under JupyterHub, the whole
store elsewhere (a laptop, ops). A bad configuration never kills the kernel: ``store`` is then
an :class:`UnavailableStore` that raises the same readable error on first use.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import Any, NoReturn

from scalelab.store.access.check import check_store
from scalelab.store.access.fs import open_store, store_settings
from scalelab.store.access.student import student_store
from scalelab.store.errors import StoreError


class UnavailableStore:
    """Stands in for ``store`` when the store could not be opened; every use raises ``error``."""

    def __init__(self, error: StoreError) -> None:
        self.error = error

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("_"):  # IPython's display probes (_repr_html_ ...) must not raise
            raise AttributeError(name)
        raise type(self.error)(str(self.error))

    def __repr__(self) -> str:
        return f"<course store unavailable: {self.error}>"


def kernel_store(
    namespace: MutableMapping[str, Any], environ: Mapping[str, str] | None = None
) -> str:
    """Put ``store`` and ``STORE_URL`` into ``namespace``; return the banner line. Never raises."""
    env = os.environ if environ is None else environ
    try:
        url, options = store_settings(env)
        namespace["STORE_URL"] = url
        check_store(url, options, env)
        user = env.get("JUPYTERHUB_USER")
        namespace["store"] = student_store(user, url, options) if user else open_store(url, options)
    except Exception as exc:  # noqa: BLE001 -- a bad store must never kill the kernel
        error = exc if isinstance(exc, StoreError) else StoreError(f"{type(exc).__name__}: {exc}")
        namespace["store"] = UnavailableStore(error)
        return f"course store unavailable: {error}"
    where = f"home/{user} and datasets/" if user else "the whole store"
    return f"course store: {url} (as `store`, an fsspec file system: {where})"
