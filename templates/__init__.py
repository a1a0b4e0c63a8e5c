"""ScaleLab's Jinja page templates (package data).

Ops override them with their own folder first in ``c.JupyterHub.template_paths``.
"""

from importlib.resources import files
from pathlib import Path


def templates_dir() -> Path:
    """Folder of ScaleLab's hub templates, for ``c.JupyterHub.template_paths``."""
    return Path(str(files(__name__)))
