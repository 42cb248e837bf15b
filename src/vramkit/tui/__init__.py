"""The live view (`vram top`). Importing this package imports Textual: only `vram top` does."""
