"""`python -m vramkit` is the `vram` command."""

from .cli.main import main

raise SystemExit(main())
