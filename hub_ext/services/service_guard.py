"""Run a hub service so that it ends with the hub, even a hub that was killed.

``python -m scalelab.hub_ext.services.service_guard -- ARGV...`` asks Linux to send the service
SIGTERM when its parent, the hub, dies (``prctl(PR_SET_PDEATHSIG)``, kept across ``exec``),
gives SIGINT back its default action if the hub was started with it ignored (a hub started in
the background by a shell script), then becomes ARGV. Elsewhere it only does the last two.
Why: docs/design-notes.md, scalelab.hub_ext.services.service_guard.
"""

from __future__ import annotations

import os
import signal
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
    # An ignored SIGINT is inherited across exec, and Python then installs no KeyboardInterrupt
    # handler: the service would sit out JupyterHub's interrupt_timeout (10 s) at each hub stop.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execv(argv[0], argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
