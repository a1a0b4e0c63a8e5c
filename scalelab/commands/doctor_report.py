"""What ``scalelab doctor`` reports: one :class:`Check` per thing checked, and the report.

Apart from :mod:`scalelab.commands.doctor` so that the checks of other modules (the Hadoop
cluster's, :mod:`scalelab.commands.doctor_hadoop`) build the same results without importing the
doctor that calls them.

Statuses: ``ok``; ``warn`` (the hub runs, with less); ``fail`` (the hub or students' kernels will
not work).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Check:
    """The outcome of one check.

    Attributes
    ----------
    name
        What was checked, e.g. ``"Java"``.
    status
        ``"ok"``, ``"warn"`` or ``"fail"``.
    detail
        What was found (a version, a path, the error).
    fix
        What to do about a warning or failure; ``""`` when ok.
    """

    name: str
    status: str
    detail: str
    fix: str = ""

    @property
    def ok(self) -> bool:
        """False only for a failure (a warning is not one)."""
        return self.status != FAIL


def exit_status(checks: Sequence[Check]) -> int:
    """0 when no check failed (warnings allowed), else 1."""
    return 0 if all(c.ok for c in checks) else 1


def format_checks(checks: Sequence[Check]) -> str:
    """The report: one line per check, its fix indented below a warning or failure."""
    marks = {OK: "[ ok ]", WARN: "[warn]", FAIL: "[FAIL]"}
    lines = []
    for c in checks:
        lines.append(f"{marks[c.status]} {c.name}: {c.detail}")
        if c.fix and c.status != OK:
            lines.append(f"       fix: {c.fix}")
    failed = [c.name for c in checks if not c.ok]
    lines.append(
        f"{len(failed)} check(s) failed: {', '.join(failed)}" if failed else "All checks passed."
    )
    return "\n".join(lines)
