"""tinylm: a small, fast, fully inspectable Transformer language model: text, and translation pairs."""

__version__ = "0.1.0"  # the package's version (pyproject.toml reads it from here)
