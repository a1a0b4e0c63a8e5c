"""A kernelspec manager whose allow-list also holds for starting kernels.

:class:`CourseKernelSpecManager` refuses a kernelspec outside ``allowed_kernelspecs`` in
``get_kernel_spec`` too, so a REST client cannot start another kernel; names are matched
case-insensitively (:func:`normalise_kernel_name`), as jupyter_client matches them.
Why: docs/design-notes.md, scalelab.kernels.specmanager.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel
from tornado import web
from traitlets import TraitError, validate


def normalise_kernel_name(name: str) -> str:
    """The form under which jupyter_client finds a kernelspec name: ``name.lower()``.

    Source: jupyter_client.kernelspec -- ``_list_kernels_in`` keys every kernelspec folder by
    ``f.lower()`` (so ``find_kernel_specs``/``get_all_specs`` list lower-cased names), and
    ``KernelSpecManager.get_kernel_spec`` looks ``kernel_name.lower()`` up
    (``_find_spec_directory`` compares it with ``f.lower()``). The one place ScaleLab
    normalises a kernel name.
    """
    return name.lower()


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
    """``KernelSpecManager`` that only gives out the allowed kernelspecs.

    ``allowed_kernelspecs`` is kept normalised (:func:`normalise_kernel_name`), however it is set
    (config file, command line, later assignment), so jupyter_client's own filter in
    ``find_kernel_specs`` (which compares its lower-cased names with the set as it is) and
    :meth:`get_kernel_spec` agree with jupyter_client's case-insensitive look-up.
    """

    @validate("allowed_kernelspecs")
    def _normalise_allowed(self, proposal: Any) -> set[str]:
        """Each allowed name as jupyter_client finds it.

        Raises
        ------
        traitlets.TraitError
            An entry is not a string; the message names it.
        """
        names = set()
        for name in proposal["value"]:
            if not isinstance(name, str):
                raise TraitError(
                    f"KernelSpecManager.allowed_kernelspecs holds {name!r}, "
                    f"a {type(name).__name__}; it takes kernelspec names (strings)"
                )
            names.add(normalise_kernel_name(name))
        return names

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        """The kernelspec ``kernel_name``, matched case-insensitively as jupyter_client does.

        Source: ``jupyter_client.kernelspec.KernelSpecManager.get_kernel_spec``, which looks
        ``kernel_name.lower()`` up; the allow-list is matched the same way
        (:func:`normalise_kernel_name`).

        Raises
        ------
        jupyter_client.kernelspec.NoSuchKernel
            Not installed; or not in ``allowed_kernelspecs`` (when that is set), then as
            :class:`KernelNotOffered` (naming ``kernel_name`` as given and the allowed names),
            which the server answers with HTTP 404.
        """
        allowed = self.allowed_kernelspecs
        if allowed and normalise_kernel_name(kernel_name) not in allowed:
            raise KernelNotOffered(kernel_name, allowed)
        return super().get_kernel_spec(kernel_name)
