"""A ScaleLab kernel started directly through jupyter_client (no hub), for kernel-level tests."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Mapping

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager


class Kernel:
    """One running kernel of kernelspec ``name`` with environment ``env``; use as a context."""

    def __init__(
        self,
        name: str,
        env: Mapping[str, str],
        cwd: str | None = None,
        output: os.PathLike[str] | None = None,
    ):
        """``output``: a file for the kernel process's own stdout and stderr (its JVM's too);
        None: the test process's."""
        # Kernelspecs from the kernel's JUPYTER_PATH (the test process's may differ).
        dirs = [f"{d}/kernels" for d in env.get("JUPYTER_PATH", "").split(os.pathsep) if d]
        ksm = KernelSpecManager(kernel_dirs=dirs) if dirs else KernelSpecManager()
        self.km = KernelManager(kernel_name=name, kernel_spec_manager=ksm)
        self.env = dict(env)
        self.cwd = cwd
        self.output = output
        self.started_at = 0.0

    def __enter__(self) -> Kernel:
        self.started_at = time.monotonic()
        if self.output is None:
            self.km.start_kernel(env=self.env, cwd=self.cwd)
        else:
            with open(self.output, "ab") as out:  # the kernel keeps its own copy of the fd
                self.km.start_kernel(env=self.env, cwd=self.cwd, stdout=out, stderr=out)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=180)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    def reply_to(self, msg_id: str, timeout_s: float = 60) -> dict:
        """The shell reply to the request ``msg_id`` (sent with ``kc.execute``). Replies to
        other requests are passed over: ``wait_for_ready`` may have sent more than one
        ``kernel_info_request`` to a kernel slow to start, and their replies come later.

        Raises ``queue.Empty`` when none comes within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def late_streams(self, name: str, wait_s: float = 1.0) -> str:
        """The text of the ``name`` streams (``"stderr"``...) the kernel sends within
        ``wait_s`` seconds, whichever request they answer: a cell's output that a thread of
        the kernel flushes after the cell's reply (under load) keeps that cell's parent
        header, and :meth:`run` of the next cell passes over messages of other requests."""
        text = ""
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = self.kc.get_iopub_msg(timeout=left)
            except queue.Empty:
                break
            if msg["msg_type"] == "stream" and msg["content"]["name"] == name:
                text += msg["content"]["text"]
        return text

    def run(self, code: str, timeout_s: float = 300) -> dict:
        """Execute ``code``; returns ``stdout``, ``stderr``, ``result`` (text/plain or None),
        ``display`` (each display_data's bundle, in order), ``error`` ((ename, evalue) or None),
        ``traceback`` (the error's lines), ``order`` (``(kind, text)`` of each message as it
        came: ``("stderr", "...")``, ``("error", "")``...), ``status`` and ``ename`` (the
        reply's)."""
        out: dict = {"stdout": "", "stderr": "", "result": None, "error": None, "display": []}
        out.update(traceback=[], order=[])

        def hook(msg: dict) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out["order"].append((content["name"], content["text"]))
            else:
                out["order"].append((kind, ""))
            if kind == "stream":
                out[content["name"]] += content["text"]
            elif kind == "execute_result":
                out["result"] = content["data"].get("text/plain")
            elif kind == "display_data":
                out["display"].append(content["data"])
            elif kind == "error":
                out["error"] = (content["ename"], content["evalue"])
                out["traceback"] = content["traceback"]

        reply = self.kc.execute_interactive(code, timeout=timeout_s, output_hook=hook)
        out["status"] = reply["content"]["status"]
        out["ename"] = reply["content"].get("ename")
        return out


def folded_traces(out: dict) -> list[dict]:
    """The folded-traces blocks (kernels/trace_block.py) among ``out``'s displays, as
    :meth:`Kernel.run` gives them: each a bundle with ``text/html`` and ``text/plain``."""
    return [d for d in out["display"] if 'class="scalelab-trace"' in d.get("text/html", "")]
