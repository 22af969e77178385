"""``python -m amends``: the same as the ``amends`` command (and ``python -m amends.cli``)."""

from .cli import main

raise SystemExit(main())
