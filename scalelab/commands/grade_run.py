"""One grading run, inside the sandbox ``scalelab autograde`` made for it (its own user,
network namespace, cgroup and folder): ``python -m scalelab.commands.grade_run <folder>
<cell timeout s>`` executes ``<folder>/grading.ipynb`` with nbclient (errors allowed, each cell
timed out) and writes ``<folder>/executed.ipynb`` and ``<folder>/stop.json`` (``null``, or why
the run stopped: a cell's timeout, the kernel's death).
Why: docs/design-notes.md, scalelab.hub_ext.labs.autograde.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def run(folder: Path, cell_timeout_s: float) -> dict | None:
    """Execute the folder's grading notebook; what stopped it (``{"reason", "index"}``: the
    index of the cell that was running), or None."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    notebook = nbformat.read(folder / "grading.ipynb", as_version=4)
    kernel = notebook.metadata.get("kernelspec", {}).get("name", "python3")
    running = {"index": 0}

    def started(cell: object, cell_index: int) -> None:
        running["index"] = cell_index

    client = NotebookClient(
        notebook,
        timeout=cell_timeout_s,
        allow_errors=True,
        kernel_name=kernel,
        resources={"metadata": {"path": str(folder)}},
        on_cell_execute=started,
    )
    stop = None
    try:
        client.execute()
    except CellTimeoutError:
        stop = {"reason": f"timed out: a cell ran over {cell_timeout_s:g} s", **running}
    except DeadKernelError:
        reason = "the kernel died (over the memory limit, or the code ended it)"
        stop = {"reason": reason, **running}
    finally:
        nbformat.write(notebook, folder / "executed.ipynb")
    return stop


def main(argv: list[str]) -> int:
    folder, timeout = Path(argv[0]), float(argv[1])
    stop = run(folder, timeout)
    (folder / "stop.json").write_text(json.dumps(stop))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
