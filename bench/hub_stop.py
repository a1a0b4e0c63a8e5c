"""How long a plain ``jupyterhub -f`` hub with ScaleLab takes to stop, as JSON.

Starts the operators' guide's recipe (``scalelab.configure(c)``, its idle culler and GPU monitor as
services) ``--runs`` times each way, alternating: ``foreground`` as a terminal or a service
manager starts it, ``background`` as a shell script's ``jupyterhub -f ... &`` does (SIGINT
ignored, inherited by the hub and its services). Each run waits until both services have called
the hub, sends the hub SIGTERM and times its exit: ``stop_s`` per run and the medians. The issue's
bound: under 5 s either way (it was 27-35 s in the background before the service guard gave SIGINT
back its default action). Usage::

    .venv/bin/python bench/hub_stop.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import secrets
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._run_info import RunInfo
from scalelab.common.ports import free_port
from tests.integration.hub.test_configure import CALLERS, _guide_recipe, _hub, _hub_file


def one_stop(folder: Path, background: bool) -> float:
    """Seconds from SIGTERM to the hub's exit, once both services run."""
    config = _hub_file(folder, secrets.token_hex(16), free_port(), _guide_recipe())
    hub = _hub(config, sigint_ignored=background)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(hub.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not all(any(c in line for line in list(lines)) for c in CALLERS):
        if hub.poll() is not None or time.monotonic() > deadline:
            hub.kill()
            raise SystemExit("the hub did not start:\n" + "".join(lines[-40:]))
        time.sleep(0.2)
    started = time.perf_counter()
    hub.send_signal(signal.SIGTERM)
    hub.wait(timeout=120)
    stop_s = time.perf_counter() - started
    reader.join(timeout=10)
    hub.stdout.close()
    return round(stop_s, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    info = RunInfo()
    runs: dict[str, list[float]] = {"foreground": [], "background": []}
    with tempfile.TemporaryDirectory(prefix="scalelab-hub-stop-") as tmp:
        for i in range(args.runs):
            for way in runs:
                folder = Path(tmp) / f"{way}-{i}"
                folder.mkdir()
                runs[way].append(one_stop(folder, background=way == "background"))
    out = {f"{way}_stop_s": times for way, times in runs.items()}
    out |= {f"{way}_stop_median_s": statistics.median(t) for way, t in runs.items()}
    print(json.dumps(out | info.figures(), indent=2))


if __name__ == "__main__":
    main()
