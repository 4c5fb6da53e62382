"""tinylm: a small, fast, fully inspectable decoder-only character Transformer."""

__version__ = "0.1.0"
