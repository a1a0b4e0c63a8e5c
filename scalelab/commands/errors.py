"""Errors that the ``scalelab`` command prints in one line (``scalelab: error: ...``, exit 2).

A module of its own, so that :func:`scalelab.cli.main` catches them without importing the verbs.
"""


class UpError(Exception):
    """A problem ``scalelab up`` (or ``doctor``) reports in one message, without a traceback."""
