"""``python -m scalelab`` is the ``scalelab`` command."""

from scalelab.cli import main

raise SystemExit(main())
