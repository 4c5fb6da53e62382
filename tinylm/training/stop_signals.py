"""The stop signals of a run or a sweep (Ctrl-C and SIGTERM): taking them, a second one stopping at once, and the
exit code they leave. No Lightning here: a sweep's own process (``tinylm.runs.sweep_stop``) imports it without
importing the training stack, which its parallel workers import (``tinylm.runs.sweep_workers``)."""

from __future__ import annotations

import signal

STOP_SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}  # what stops a run cleanly, as told to the user
# what a second stop signal does: stop at once (SIGINT raises KeyboardInterrupt, SIGTERM ends the process)
AT_ONCE = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


def take_stop_signals(handler) -> dict[int, object]:
    """``handler`` for Ctrl-C and SIGTERM; returns the handlers it replaced (for ``restore_signals``)."""
    return {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}


def stop_at_once_next() -> None:
    """After a first stop signal: a second one stops at once (``AT_ONCE``)."""
    for signum, handler in AT_ONCE.items():
        signal.signal(signum, handler)


def restore_signals(previous: dict[int, object]) -> None:
    """Put back the handlers ``take_stop_signals`` replaced (one set outside Python: the default)."""
    for signum, handler in previous.items():
        signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def exit_code(signum: int) -> int:
    """How a program stopped by this signal exits: 128 + its number (Ctrl-C 130, SIGTERM 143)."""
    return 128 + int(signum)
