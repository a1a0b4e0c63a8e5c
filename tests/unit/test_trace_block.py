"""An explained error's output shapes (kernels/trace_block.py, pure): one short error line, and
the traces as one collapsed, escaped block."""

from __future__ import annotations

from scalelab.kernels.trace_block import SUMMARY, error_line, folded_block

JAVA = (
    "An error occurred while calling o59.collectToPython.\n"
    ": java.lang.OutOfMemoryError: Java heap space\n"
    "\tat java.base/java.util.Arrays.copyOf(Arrays.java:3537)"
)


def test_the_error_line_is_the_type_and_the_first_line_only():
    line = error_line("Py4JJavaError", JAVA)
    assert (
        line
        == "\x1b[0;31mPy4JJavaError\x1b[0m: An error occurred while calling o59.collectToPython."
    )
    assert "\n" not in line
    assert error_line("ConnectionRefusedError", "\n\n  [Errno 111] Connection refused\n").endswith(
        ": [Errno 111] Connection refused"
    )
    assert error_line("Py4JError", "") == "\x1b[0;31mPy4JError\x1b[0m"


def test_the_traces_are_one_collapsed_escaped_block_without_colours():
    stb = ["\x1b[0;31m----\x1b[0m", "Cell In[1], line 1\n----> 1 df.collect() <b>x</b>", JAVA]
    bundle = folded_block(stb)
    assert set(bundle) == {"text/plain", "text/html"}
    assert "\x1b[" not in bundle["text/plain"] and "\x1b[" not in bundle["text/html"]
    assert bundle["text/plain"].count("\n") + 1 == 6
    html = bundle["text/html"]
    assert html.startswith('<details class="scalelab-trace"><summary>')
    assert "<details open" not in html  # folded until the student opens it
    assert SUMMARY.format(lines=6) in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>" not in html  # the trace's text is escaped
    assert html.endswith("</pre></details>")
