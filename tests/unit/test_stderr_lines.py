"""Known-harmless lines that native code writes to stderr are dropped by their text only (issue 13):
the parts that need no running hub, kernel or cluster. The rest runs for real in
``tests/integration/spark/test_stderr_lines.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from scalelab.common.stderr_lines import LineFilter
from scalelab.kernels.import_order import TENSORFLOW_IMPORT_LINES
from scalelab.kernels.spark_session import JVM_START_LINES

PREAMBLE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


ONEDNN = (
    b"I0000 00:00:1796284164.000791    6044 port.cc:153] oneDNN custom operations are on. You may "
    b"see slightly different numerical results due to floating-point round-off errors from "
    b"different computation orders. To turn them off, set the environment variable "
    b"`TF_ENABLE_ONEDNN_OPTS=0`."
)


INCUBATOR = b"WARNING: Using incubator modules: jdk.incubator.vector"


def _filtered(known, pieces: list[bytes]) -> bytes:
    lines = LineFilter(known)
    return b"".join(lines.feed(p) for p in pieces) + lines.flush()


def test_the_known_lines_are_dropped_and_every_other_byte_passes_in_order():
    stream = b"".join(
        line + b"\n"
        for line in (b"first", PREAMBLE, ONEDNN, b"E a real error", PREAMBLE, ONEDNN, b"last")
    )
    expected = b"first\nE a real error\nlast\n"
    assert _filtered(TENSORFLOW_IMPORT_LINES, [stream]) == expected
    # Whatever the pieces the pipe delivers: byte by byte too.
    assert _filtered(TENSORFLOW_IMPORT_LINES, [bytes([b]) for b in stream]) == expected
    assert _filtered(JVM_START_LINES, [INCUBATOR + b"\nWARN real\n"]) == b"WARN real\n"


def test_a_preamble_goes_only_with_its_line_and_a_look_alike_passes():
    # abseil's preamble before another line is that line's, and stays.
    alone = PREAMBLE + b"\nE0000 something else\n"
    assert _filtered(TENSORFLOW_IMPORT_LINES, [alone]) == alone
    assert _filtered(TENSORFLOW_IMPORT_LINES, [PREAMBLE + b"\n"]) == PREAMBLE + b"\n"
    for near in (
        INCUBATOR + b", jdk.incubator.foreign",  # another module: worth seeing
        b"x " + INCUBATOR,
    ):
        assert _filtered(JVM_START_LINES, [near + b"\n"]) == near + b"\n"
    assert _filtered(TENSORFLOW_IMPORT_LINES, [ONEDNN[:40]]) == ONEDNN[:40]  # partial: passes


UNCAUGHT = b"""\
Exception in thread "Spark Context Cleaner" java.lang.OutOfMemoryError: Java heap space
\tat java.base/java.lang.invoke.DirectMethodHandle.allocateInstance(DirectMethodHandle.java:520)
\tat org.apache.spark.ContextCleaner.$anonfun$keepCleaning$1(ContextCleaner.scala:198)
Caused by: java.io.IOException: broken
\tat org.apache.spark.Foo.bar(Foo.scala:1)
\t... 2 more
08:20:54 ERROR Utils: Uncaught exception in thread executor-heartbeater
"""


def test_java_frames_the_jvm_prints_itself_are_folded_into_one_line_per_run():
    folded = b"""\
Exception in thread "Spark Context Cleaner" java.lang.OutOfMemoryError: Java heap space
\t... 2 Java frames left out
Caused by: java.io.IOException: broken
\t... 2 Java frames left out
08:20:54 ERROR Utils: Uncaught exception in thread executor-heartbeater
"""
    lines = LineFilter(JVM_START_LINES, fold_java_frames=True)
    assert b"".join(lines.feed(bytes([b])) for b in UNCAUGHT) + lines.flush() == folded
    # A trace that ends the stream (or goes quiet) still says what was left out.
    lines = LineFilter((), fold_java_frames=True)
    cut = UNCAUGHT.split(b"Caused by")[0]
    assert lines.feed(cut) + lines.flush() == folded.split(b"Caused by")[0]
    # Without folding, every frame passes; a line that only mentions "at" is no frame.
    assert _filtered((), [UNCAUGHT]) == UNCAUGHT
    lines = LineFilter((), fold_java_frames=True)
    assert lines.feed(b"look at this\n  at the end\n") == b"look at this\n  at the end\n"


def _child(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        timeout=600,
        env={**os.environ, **env},
    )


def test_filtered_stderr_filters_fd_2_of_the_process_and_its_children_then_restores_it():
    done = _child(
        """
        import os, subprocess, sys
        from scalelab.kernels.import_order import TENSORFLOW_IMPORT_LINES as KNOWN
        from scalelab.common.stderr_lines import filtered_stderr
        os.write(2, b"before\\n")
        with filtered_stderr(KNOWN):
            os.write(2, b"%s\\n%s\\nC code's line\\n" % (PREAMBLE, ONEDNN))
            subprocess.run(["sh", "-c", "echo a child line >&2"], check=True)
            print("python's own stderr", file=sys.__stderr__, flush=True)
        os.write(2, b"%s\\nafter\\n" % ONEDNN)
        """.replace("PREAMBLE", repr(PREAMBLE)).replace("ONEDNN", repr(ONEDNN))
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        b"before",
        b"C code's line",
        b"a child line",
        b"python's own stderr",
        ONEDNN,  # after the block: not filtered
        b"after",
    ]


def test_the_tensorflow_import_hook_drops_the_onednn_lines_only(tmp_path: Path):
    """A stand-in ``tensorflow`` package that writes TensorFlow's lines and a real one to fd 2,
    imported through the kernels' import hook: the real line shows, the known ones do not; the
    module keeps its own loader."""
    package = tmp_path / "tensorflow"
    package.mkdir()
    known = PREAMBLE + b"\n" + ONEDNN + b"\n"
    (package / "__init__.py").write_text(
        f"import os\nos.write(2, {known!r})\n"
        "os.write(2, b'E tensorflow: a real error\\n')\n"
        f"os.write(2, {known!r})\n"
    )
    code = (
        "from scalelab.kernels import import_order\n"
        "assert import_order.install()\n"
        "import tensorflow\n"
        "print(type(tensorflow.__loader__).__name__, type(tensorflow.__spec__.loader).__name__)\n"
    )
    done = _child(code, PYTHONPATH=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"E tensorflow: a real error\n"
    assert done.stdout.split() == [b"SourceFileLoader", b"SourceFileLoader"]
    # Without the hook the lines show: what the hook takes away.
    plain = _child("import tensorflow\n", PYTHONPATH=str(tmp_path))
    assert plain.stderr.count(b"oneDNN custom operations are on") == 2


def test_the_real_tensorflow_import_says_nothing_on_stderr():
    done = _child(
        "from scalelab.kernels import import_order\n"
        "assert import_order.install()\n"
        "import tensorflow as tf\n"
        "print(tf.constant(2) * 21)\n",
        TF_CPP_MIN_LOG_LEVEL="2",  # as in the TensorFlow kernel
    )
    assert done.returncode == 0, done.stderr
    assert b"42" in done.stdout
    assert done.stderr == b"", done.stderr
