"""An explained error shown as the answer first and its traces folded (pure).

Under a cell whose Spark failure ScaleLab explains, the explanation comes first (stderr), then
one short error output (:func:`error_line`: the exception's type and first line, what
nbclient and the execute reply name), then the Python and Java traces as one collapsed block
(:func:`folded_block`: an HTML ``<details>`` that JupyterLab's sanitizer keeps, with the same
text as ``text/plain`` for terminals). Why: docs/design-notes.md, scalelab.kernels.spark_errors.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: The colours IPython gives an exception's name in a traceback.
_RED, _RESET = "\x1b[0;31m", "\x1b[0m"
#: The block's summary line; ``{lines}`` is the count of lines folded in it.
SUMMARY = "Python and Java traces of this error ({lines} lines): click to unfold"


def error_line(ename: str, evalue: str) -> str:
    """The one line an explained error's output shows: ``ename`` in IPython's red, and the
    first non-empty line of ``evalue`` (a ``Py4JJavaError``'s text goes on with the whole Java
    trace, which the folded block holds)."""
    first = next((line.strip() for line in evalue.splitlines() if line.strip()), "")
    return f"{_RED}{ename}{_RESET}: {first}" if first else f"{_RED}{ename}{_RESET}"


def folded_block(stb: Sequence[str]) -> dict[str, str]:
    """A display bundle of the structured traceback ``stb`` (IPython's parts, colour codes and
    all) folded: ``text/html`` a collapsed ``<details>`` whose ``<summary>`` is
    :data:`SUMMARY` and whose body is the traces as escaped preformatted text (no colour);
    ``text/plain`` the same traces, for frontends without HTML."""
    text = _ANSI.sub("", "\n".join(stb)).strip("\n")
    lines = text.count("\n") + 1 if text else 0
    summary = html.escape(SUMMARY.format(lines=lines))
    return {
        "text/plain": text,
        "text/html": (
            f'<details class="scalelab-trace"><summary>{summary}</summary>'
            f"<pre>{html.escape(text)}</pre></details>"
        ),
    }
