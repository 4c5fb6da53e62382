"""The routes' side of HTTP: parameters checked, answers and errors as JSON.

Every failure is an answer ``{"error": "<one line: the problem and the fix>"}``: 400 for a bad parameter
(a query whose percent escapes are not UTF-8 included) or a checkpoint that cannot be loaded, 404 for a run
that is not in the logdir or has no checkpoint, 409 for a checkpoint replaced while it was being read (a
run training: ask again), 500 (the traceback in TensorBoard's log, never in the answer) for a fault of the
plugin itself. A TinyLMError says its code in ``status`` (400 without one).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from urllib.parse import unquote_to_bytes

from tensorboard.backend import http_util
from werkzeug import wrappers

from tinylm.errors import TinyLMError
from tinylm.values import one_line, whole_number

log = logging.getLogger(__name__)

MAX_TEXT = 4096  # characters of ``text``
MAX_K = 50  # next tokens per position
HEAD = re.compile(r"\d+\.\d+")


class BadParameter(TinyLMError):
    """A request the routes refuse with 400."""


def answer(request, data: dict, code: int = 200):
    return http_util.Respond(request, data, "application/json", code=code)


def json_route(handler: Callable) -> Callable:
    """A route ``handler(self, request) -> dict`` as a werkzeug application answering JSON, errors included."""
    @functools.wraps(handler)
    @wrappers.Request.application
    def route(self, request):
        try:
            utf8_query(request)
            return answer(request, handler(self, request))
        except TinyLMError as e:
            return answer(request, {"error": one_line(e)}, getattr(e, "status", 400))
        except Exception as e:  # a fault of the plugin: logged with its traceback, answered in one line
            log.exception("tinylm plugin: %s failed", request.path)
            return answer(request, {"error": one_line(f"the tinylm plugin failed ({type(e).__name__}: {e}); "
                                                      "see TensorBoard's log")}, 500)
    return route


def utf8_query(request) -> None:
    """BadParameter when a parameter's bytes (after its percent escapes) are not UTF-8: werkzeug would read
    ``text=%FF%FE`` as the characters ``%FF%FE``."""
    for pair in request.query_string.split(b"&"):
        name, _, value = pair.partition(b"=")
        for part in (name, value):
            try:
                unquote_to_bytes(part).decode("utf-8")
            except UnicodeDecodeError:
                shown = unquote_to_bytes(name).decode("utf-8", "replace")
                raise BadParameter(f"the {shown} parameter is not UTF-8 text ({pair[:40].decode('ascii', 'replace')}): "
                                   "send its UTF-8 bytes percent-encoded (as encodeURIComponent does)") from None


def parameter(request, name: str, default: str | None = None) -> str:
    """A query parameter, as given; BadParameter when it is missing and has no default."""
    value = request.args.get(name, default)
    if value is None:
        raise BadParameter(f"the {name} parameter is missing: add {name}=... to the query")
    return value


def text_of(request) -> str:
    """``text``: at most ``MAX_TEXT`` characters."""
    text = parameter(request, "text")
    if len(text) > MAX_TEXT:
        raise BadParameter(f"text is {len(text)} characters long: send at most {MAX_TEXT}")
    return text


def ablate_of(request) -> list[str]:
    """``ablate=1.0,1.3``: the heads to switch off as "layer.head" strings (checked against the model later)."""
    heads = [part.strip() for part in request.args.get("ablate", "").split(",") if part.strip()]
    for head in heads:
        if not HEAD.fullmatch(head):
            raise BadParameter(f"ablate: {head!r} is not layer.head: write e.g. ablate=1.0,1.3 (layer 1 head 0 and "
                               "layer 1 head 3, counted from 0)")
    return heads


def k_of(request) -> int:
    """``k``: how many next tokens per position, 1 to ``MAX_K`` (default 5)."""
    value = parameter(request, "k", "5")
    k = whole_number(value)
    if k is None or not 1 <= k <= MAX_K:
        raise BadParameter(f"k={value!r} must be a whole number from 1 to {MAX_K}")
    return k
