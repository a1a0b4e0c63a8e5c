"""A kernelspec manager whose allow-list also holds for starting kernels.

jupyter_client's ``KernelSpecManager.allowed_kernelspecs`` hides other kernelspecs from the
list, but ``get_kernel_spec`` still returns them, so a REST client could start any kernel
installed beside the server (``POST /api/kernels {"name": "python3"}``). ScaleLab's servers use
:class:`CourseKernelSpecManager`, which refuses those too.
"""

from __future__ import annotations

from collections.abc import Iterable

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel
from tornado import web


class KernelNotOffered(NoSuchKernel, web.HTTPError):
    """A kernel the course does not offer: ``NoSuchKernel`` for Jupyter, HTTP 404 for the client."""

    def __init__(self, name: str, offered: Iterable[str]):
        NoSuchKernel.__init__(self, name)
        offered_text = ", ".join(sorted(offered))
        message = f"kernel {name} is not offered here; offered: {offered_text}"
        web.HTTPError.__init__(self, 404, message.replace("%", "%%"))
        self.reason = f"No such kernel: {name}"

    def __str__(self) -> str:
        return web.HTTPError.__str__(self)


class CourseKernelSpecManager(KernelSpecManager):
    """``KernelSpecManager`` that only gives out the allowed kernelspecs."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        """The kernelspec ``kernel_name``.

        Raises
        ------
        jupyter_client.kernelspec.NoSuchKernel
            Not installed; or not in ``allowed_kernelspecs`` (when that is set), then as
            :class:`KernelNotOffered`, which the server answers with HTTP 404.
        """
        if self.allowed_kernelspecs and kernel_name not in self.allowed_kernelspecs:
            raise KernelNotOffered(kernel_name, self.allowed_kernelspecs)
        return super().get_kernel_spec(kernel_name)
