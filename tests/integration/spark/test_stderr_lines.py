"""Known-harmless lines that native code writes to stderr are dropped by their text only (issue
13): TensorFlow's "oneDNN custom operations are on" at its import, the JVM's "Using incubator
modules"; every other line, before, between or after them, still shows.

The parts that need no running service: ``tests/unit/test_stderr_lines.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.kernelrun import Kernel


def _student_env(kernel_environment: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A kernel's environment as a student's server gives it: without pytest's marker, so that
    ipykernel captures file descriptors 1 and 2 into the cells' output as it does there."""
    env = {k: v for k, v in kernel_environment.items() if k != "PYTEST_CURRENT_TEST"}
    return {**env, "SCALELAB_LOG_DIR": str(tmp_path / "logs")}


def test_pyspark_kernel_drops_the_incubator_line_and_a_real_jvm_line_still_shows(
    kernel_environment: dict[str, str], tmp_path: Path
):
    output = tmp_path / "kernel-output.txt"  # the kernel process's own stderr (echoed)
    env = _student_env(kernel_environment, tmp_path)
    shown = ""
    with Kernel("scalelab-pyspark", env, cwd=str(tmp_path), output=output) as kernel:
        for code in (
            "spark.range(3).count()",
            "spark._jvm.java.lang.System.err.println('a real JVM line')",
        ):
            out = kernel.run(code)
            assert out["error"] is None, out
            shown += out["stderr"]
        # The filter's thread passes the JVM's line on to the kernel's stderr, whose thread
        # sends it with the cell running then, or after the cell's reply with its parent:
        # under load (the suite's) that can take seconds, so look for up to 60.
        for _ in range(30):
            if "a real JVM line" in shown:
                break
            shown += kernel.late_streams("stderr", wait_s=1.0)
            shown += kernel.run("import time; time.sleep(1)")["stderr"]
    assert "a real JVM line" in shown
    assert "incubator" not in shown
    echoed = output.read_text()
    assert "a real JVM line" in echoed
    assert not re.search("incubator modules", echoed), echoed


def test_tensorflow_kernel_imports_tensorflow_without_stderr(
    kernel_environment: dict[str, str], tmp_path: Path
):
    env = _student_env(kernel_environment, tmp_path)
    with Kernel("scalelab-tensorflow", env, cwd=str(tmp_path)) as kernel:
        out = kernel.run("import tensorflow as tf\nint(tf.constant(6) * 7)")
        assert out["result"] == "42", out
        assert out["stderr"] == "", out["stderr"]
        real = kernel.run("import os, time\nos.write(2, b'a real native line\\n')\ntime.sleep(1)")
        assert "a real native line" in real["stderr"]
