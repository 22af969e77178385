"""``python -m amends.cli``: the same as the ``amends`` command."""

from . import main

raise SystemExit(main())
