"""The `vram` command: one module per subcommand. Thin: parse, call the library, render."""
