"""The one exception type for bad input: its message is a single line saying what and how to fix; and how a
command stopped by Ctrl-C exits."""

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program Ctrl-C stopped


class TinyLMError(Exception):
    """A user-facing error. Entry points print ``error: <message>`` and exit non-zero."""
