"""tlgeo's version (read by ``tlgeo --version`` without importing torch, and carried by every result row)."""

__version__ = "0.1.0"
