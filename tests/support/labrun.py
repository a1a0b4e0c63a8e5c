"""Executing a lab notebook headless through a ScaleLab kernel (nbclient), papermill-style.

The lab's cell tagged ``parameters`` is followed by an injected cell of overrides (e.g. fewer
epochs for CI), and a last injected cell prints the named results as JSON, which is returned.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

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


STUB = "raise NotImplementedError()"


def run_student_and_reference(
    source: Path,
    student: Path,
    *,
    workdir: Path,
    env: dict[str, str],
    overrides: str = "",
    results: tuple[str, ...] = (),
    timeout_s: int = 1200,
    shown: list[str] | None = None,
    executed: list[tuple[str, list[dict]]] | None = None,
    reference_out: Path | None = None,
) -> tuple[dict, list[int]]:
    """Execute a lab's student version and its instructor (reference) version in one kernel.

    The two notebooks are matched cell for cell (``scalelab labs release`` keeps cells one for
    one). Cells that are the same run once. Where they differ, the student's cell runs first and
    must either succeed (a stub inside a function the cell only defines) or, if it holds a stub,
    fail with ``NotImplementedError`` and nothing else; then the reference cell (solution and
    hidden tests) runs and must succeed, so that the cells after it find what the lab built. So
    every student cell and every reference cell is executed, each on the state the notebook would
    have at that point.

    Returns the named results (evaluated after the last cell) and the indices of the stub cells
    that raised ``NotImplementedError``. ``shown``, when given, gets every executed cell's
    visible text: its streams and the ``text/plain`` of its results and displays;
    ``executed`` gets ``(source, outputs)`` of every executed cell, in order;
    ``reference_out``, when given, is where the executed reference notebook is written (each
    code cell with the outputs of its reference run, or of its one run where the two are the
    same), e.g. for nbconvert.

    The kernel gets ``env`` less pytest's ``PYTEST_CURRENT_TEST``: with it, ipykernel leaves
    file descriptors 1 and 2 alone, and what native code (TensorFlow, the JVM) writes there
    would miss the cells, where a student's server shows it.
    """
    env = {k: v for k, v in env.items() if k != "PYTEST_CURRENT_TEST"}
    ref = nbformat.read(source, as_version=4)
    stu = nbformat.read(student, as_version=4)
    assert [c.id for c in ref.cells] == [c.id for c in stu.cells], "cells not matched one for one"
    index = next(
        i for i, c in enumerate(ref.cells) if "parameters" in c.get("metadata", {}).get("tags", [])
    )
    pairs = [(s, r) for s, r in zip(stu.cells, ref.cells, strict=True) if s.cell_type == "code"]
    code_index = sum(1 for c in ref.cells[: index + 1] if c.cell_type == "code")
    if overrides:
        injected = nbformat.v4.new_code_cell(overrides)
        pairs.insert(code_index, (injected, injected))
    names = ", ".join(f"{name!r}: {name}" for name in results)
    last = nbformat.v4.new_code_cell(
        f"import json as _j; print({RESULT_MARK!r} + _j.dumps({{{names}}}))"
    )
    pairs.append((last, last))
    # The client's own notebook holds, at index i, the cell of pair i being executed: nbclient
    # writes each executed cell back at its index and finds there the cell whose display an
    # ``update_display_data`` (a display handle's update, e.g. a live table) changes.
    scratch = nbformat.v4.new_notebook(metadata=ref.metadata)
    scratch.cells = [s for s, _r in pairs]
    client = NotebookClient(
        scratch,
        kernel_name=ref.metadata.kernelspec.name,
        timeout=timeout_s,
        startup_timeout=180,
        resources={"metadata": {"path": str(workdir)}},
    )
    stubs_hit: list[int] = []
    with client.setup_kernel(env=env):
        for i, (s, r) in enumerate(pairs):
            # Progress on stderr: pytest shows it when a test fails or times out.
            print(f"[labrun] {source.name}: cell {i}", file=sys.stderr, flush=True)
            if s.source == r.source:
                client.execute_cell(s, i)
                continue
            try:
                client.execute_cell(s, i)
            except CellExecutionError as exc:
                assert STUB in s.source, f"student cell {i} failed:\n{s.source}\n{exc}"
                assert exc.ename == "NotImplementedError", f"student cell {i}: {exc}"
                stubs_hit.append(i)
            scratch.cells[i] = r
            client.execute_cell(r, i)
    if reference_out is not None:
        ran = iter(r if s.source != r.source else s for s, r in pairs if s is not r)
        for cell in ref.cells:
            if cell.cell_type == "code":
                cell.outputs = next(ran).get("outputs", [])
        nbformat.write(ref, reference_out)
    for s, r in pairs:
        for cell in (s,) if s is r else (s, r):
            if shown is not None:
                shown.extend(_visible_text(out) for out in cell.get("outputs", []))
            if executed is not None:
                executed.append((cell.source, list(cell.get("outputs", []))))
    text = "".join(
        out.get("text", "") for out in last.outputs if out.get("output_type") == "stream"
    )
    line = next(ln for ln in text.splitlines() if ln.startswith(RESULT_MARK))
    return json.loads(line[len(RESULT_MARK) :]), stubs_hit


def _visible_text(output: dict) -> str:
    """What a student reads of one output: a stream's text, a result's or display's text/plain."""
    if output.get("output_type") == "stream":
        return output.get("text", "")
    return str(output.get("data", {}).get("text/plain", ""))
