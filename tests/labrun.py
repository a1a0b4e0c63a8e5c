"""Executing a lab notebook headless through a ScaleLab kernel (nbclient), papermill-style.

The lab's cell tagged ``parameters`` is followed by an injected cell of overrides (e.g. fewer
epochs for CI), and a last injected cell prints the named results as JSON, which is returned.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

RESULT_MARK = "SCALELAB_RESULTS "


def run_lab(
    notebook: Path,
    *,
    workdir: Path,
    env: dict[str, str],
    overrides: str = "",
    results: tuple[str, ...] = (),
    timeout_s: int = 1200,
) -> tuple[dict, nbformat.NotebookNode]:
    """Execute ``notebook`` with its own kernelspec.

    Returns the named results (a dict) and the executed notebook.
    """
    nb = nbformat.read(notebook, as_version=4)
    index = next(
        (
            i
            for i, c in enumerate(nb.cells)
            if "parameters" in c.get("metadata", {}).get("tags", [])
        ),
        None,
    )
    assert index is not None, f"{notebook.name} has no cell tagged 'parameters'"
    if overrides:
        cell = nbformat.v4.new_code_cell(overrides, metadata={"tags": ["injected-parameters"]})
        nb.cells.insert(index + 1, cell)
    names = ", ".join(f"{name!r}: {name}" for name in results)
    nb.cells.append(
        nbformat.v4.new_code_cell(
            f"import json as _j; print({RESULT_MARK!r} + _j.dumps({{{names}}}))"
        )
    )
    client = NotebookClient(
        nb,
        kernel_name=nb.metadata.kernelspec.name,
        timeout=timeout_s,
        startup_timeout=180,
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute(env=env)
    text = "".join(
        out.get("text", "") for out in nb.cells[-1].outputs if out.get("output_type") == "stream"
    )
    line = next(ln for ln in text.splitlines() if ln.startswith(RESULT_MARK))
    return json.loads(line[len(RESULT_MARK) :]), nb
