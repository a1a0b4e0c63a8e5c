"""One grading run, inside the network namespace and cgroup ``scalelab autograde`` made for it:
``python -m scalelab.commands.grade_run <work folder> <result folder> <cell timeout s> [<uid>
<gid>]`` executes ``<work folder>/grading.ipynb`` with nbclient (errors allowed, each cell timed
out) and writes ``<result folder>/executed.ipynb`` and ``<result folder>/stop.json`` (``null``,
or why the run stopped: a cell's timeout, the kernel's death, and the cell's index).

With ``<uid> <gid>`` (the run started as root) the kernel alone runs as that user: this process
stays root, so the student's code cannot reach the result folder (root's, 0700) nor this
process, and cannot write over the grade.
Why: docs/design-notes.md, scalelab.hub_ext.labs.autograde.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def setpriv(uid: int, gid: int) -> list[str]:
    """The command prefix that runs what follows as ``uid``/``gid`` without other groups."""
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]


def _kernel_manager(kernel: str, user: tuple[int, int] | None) -> Any:
    """A jupyter_client kernel manager (the asynchronous one nbclient drives) for ``kernel``
    whose kernel runs as ``user`` (uid, gid), with its connection file given to that user (it
    must read it); None: as this process."""
    from jupyter_client.manager import AsyncKernelManager

    if user is None:
        return AsyncKernelManager(kernel_name=kernel)
    uid, gid = user

    class UserKernelManager(AsyncKernelManager):
        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            command = super().format_kernel_cmd(extra_arguments)
            return [*setpriv(uid, gid), *command]

        def write_connection_file(self, **kwargs: Any) -> tuple[str, dict]:
            written = super().write_connection_file(**kwargs)
            os.chown(self.connection_file, uid, gid)
            return written

    return UserKernelManager(kernel_name=kernel)


def run(
    folder: Path, out: Path, cell_timeout_s: float, user: tuple[int, int] | None
) -> dict | None:
    """Execute the folder's grading notebook, the executed notebook written to ``out``; what
    stopped it (``{"reason", "index"}``: the index of the cell that was running), or None."""
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
        km=_kernel_manager(kernel, user),
        timeout=cell_timeout_s,
        allow_errors=True,
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
        nbformat.write(notebook, out / "executed.ipynb")
    return stop


def main(argv: list[str]) -> int:
    folder, out, timeout = Path(argv[0]), Path(argv[1]), float(argv[2])
    user = (int(argv[3]), int(argv[4])) if len(argv) >= 5 else None
    stop = run(folder, out, timeout, user)
    (out / "stop.json").write_text(json.dumps(stop))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
