"""``python -m etsim``: the command line."""

from etsim.cli import main

raise SystemExit(main())
