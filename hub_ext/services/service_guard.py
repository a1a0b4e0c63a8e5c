"""Run a hub service so that it ends with the hub, even a hub that was killed.

``python -m scalelab.hub_ext.services.service_guard -- ARGV...`` asks Linux to send the service
SIGTERM when its parent, the hub, dies (``prctl(PR_SET_PDEATHSIG)``, kept across ``exec``),
then becomes ARGV. Elsewhere it only runs ARGV.
Why: docs/design-notes.md, scalelab.hub_ext.services.service_guard.
"""

from __future__ import annotations

import os
import sys

from scalelab.common.pdeathsig import set_parent_death_signal


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(
            "usage: python -m scalelab.hub_ext.services.service_guard -- ARGV...", file=sys.stderr
        )
        return 2
    parent = os.getppid()
    set_parent_death_signal()
    if os.getppid() != parent:  # the hub died before the signal was asked for
        return 1
    os.execv(argv[0], argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
