"""The version, in a leaf module any layer may import (the shim writes it into its files)."""

__version__ = "0.1.0"
