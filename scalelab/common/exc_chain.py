"""The chain of an exception: what it was raised from (``__cause__``) or while handling
(``__context__``), walked once even where the chain loops back on itself."""

from __future__ import annotations

from typing import TypeVar

E = TypeVar("E", bound=BaseException)


def first_in_chain(exc: BaseException | None, kind: type[E]) -> E | None:
    """The first exception of type ``kind`` among ``exc`` and its chain (``__cause__`` before
    ``__context__``, as Python shows them), or None (pure)."""
    seen: set[int] = set()
    current = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
