"""The one exception type for bad input: its message is a single line saying what and how to fix."""


class TinyLMError(Exception):
    """A user-facing error. Entry points print ``error: <message>`` and exit non-zero."""
