"""Sampling text from a GPT (or the LSTM/GRU baseline). This module holds the project's one sampling loop.

Layers, each built on the one below, so ``generate.py``, training callbacks and tests all share
the same code:

- ``sample_next(logits, ...)``: pick the next ids from one step's logits (temperature, top-k,
  top-p), never one of ``suppress_ids`` (a translation's padding and begin symbols).
- ``stream_tokens(model, idx, ...)``: THE loop. Yields the new ids (B,) one step at a time, with
  or without a cache (a GPT's KV cache, an RNN's hidden state).
- ``generate(model, idx, ...)``: collects the stream into (B, T + n), optionally stopping at ids.
- ``stream_text``: one sample as decoded pieces ready to print as they arrive, stopping after a
  given string. The text side (``encode_prompt``, ``text_pieces``, ``validate_sampling``) is in
  ``tinylm.generation.prompting``, free of torch, shared with ONNX Runtime (``tinylm.onnx.runtime``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch
from torch.nn import functional as F

from tinylm.errors import TinyLMError
from tinylm.generation.prompting import text_pieces, validate_sampling
from tinylm.models import LanguageModel
from tinylm.models.base import eval_no_grad
from tinylm.tokenizer import Tokenizer

# --------------------------------------------------------------------------------------------
# One step: logits -> next ids


def keep_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Mask (to -inf) every logit below the k-th largest of its row. (B, V) -> (B, V).

    Ties are kept, not broken arbitrarily: every token equal to the k-th largest value survives,
    so a row may keep more than k tokens. ``k`` larger than V keeps everything.
    """
    kth = torch.topk(logits, min(k, logits.size(-1)), dim=-1).values[:, -1:]  # (B, 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def keep_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering: keep the most likely tokens whose total probability first reaches p.

    A token is kept when the probability mass ranked strictly above it is below ``p``, so the most
    likely token is always kept. Tokens tied with the least likely kept token are kept too.
    (B, V) -> (B, V) with the rest masked to -inf.
    """
    if p >= 1:
        return logits
    probs = F.softmax(logits, dim=-1)  # (B, V)
    sorted_probs = probs.sort(dim=-1, descending=True).values  # (B, V)
    mass_above = sorted_probs.cumsum(dim=-1) - sorted_probs  # (B, V)
    n_kept = (mass_above < p).sum(dim=-1, keepdim=True)  # (B, 1), >= 1
    threshold = sorted_probs.gather(-1, n_kept - 1)  # (B, 1): smallest kept probability
    return logits.masked_fill(probs < threshold, float("-inf"))


def suppress(logits: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
    """``logits`` (B, V) with the columns ``ids`` at -inf: symbols that must never be produced."""
    if not ids:
        return logits
    return logits.index_fill(-1, torch.tensor(list(ids), device=logits.device), float("-inf"))


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    suppress_ids: Sequence[int] = (),
) -> torch.Tensor:
    """Next ids (B,) from the last position's logits (B, V), never one of ``suppress_ids``.

    ``temperature`` 0 is greedy (argmax; the first index wins a tie). Otherwise the logits are
    divided by the temperature, filtered by top-k then top-p (top-p sees the top-k renormalised
    distribution), and one id per row is drawn with ``generator``.

    Each row's largest logit is subtracted before dividing (softmax does not change), so even a
    tiny temperature such as 1e-40 cannot overflow to inf/inf = NaN: the best token stays at 0
    and the others fall to -inf, which is greedy (a tie at the top is drawn between the tied).
    A temperature that the logits' dtype would round to 0 (0/0 = NaN) counts as its smallest
    normal number instead, which is just as greedy.
    """
    logits = suppress(logits, suppress_ids)
    if temperature == 0:
        return logits.argmax(dim=-1)
    temperature = max(temperature, torch.finfo(logits.dtype).tiny)
    logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature  # (B, V), max 0
    if top_k is not None:
        logits = keep_top_k(logits, top_k)
    if top_p is not None:
        logits = keep_top_p(logits, top_p)
    probs = F.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


# --------------------------------------------------------------------------------------------
# The sampling loop


def _next_logits(model: LanguageModel, seq: torch.Tensor, cache) -> torch.Tensor:
    """Logits (B, V) for the token after ``seq`` (B, L), seeing at most ``context_window`` tokens.

    The reference (no cache): crop to the last block_size tokens (a GPT) and encode them all.
    With a cache, while the text fits in the block, the cache holds seq[:, :cache.length] and only
    the new tokens are encoded: the prompt at the first step, one token after that.
    Past block_size a GPT's window slides. Every kept token moves to a new position and its cached
    keys/values go stale (with rope too, see ``KVCache``). From then on each step re-encodes the
    last block_size tokens exactly like the reference. Past block_size the cache gives no speed-up,
    and the output stays exactly the same as without it.
    An RNN has no window: its reference reads the whole text, and its hidden state (the cache)
    never goes stale, so with the cache it reads one new token per step however long the text.
    """
    window = model.context_window
    if cache is not None and (window is None or seq.size(1) <= window):
        logits, _ = model(seq[:, cache.length :], cache=cache, last_only=True)
    else:
        logits, _ = model(seq if window is None else seq[:, -window:], last_only=True)
    return logits[:, -1]  # (B, V)


def stream_tokens(
    model: LanguageModel,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    suppress_ids: Sequence[int] = (),
) -> Iterator[torch.Tensor]:
    """Yield ``max_new_tokens`` steps of new ids, each (B,), continuing the prompt ``idx`` (B, T).

    ``suppress_ids``: ids never produced (see ``sample_next``). Arguments are checked now, not at
    the first step. Each step runs in eval mode under ``torch.no_grad`` and restores the model's
    mode after. Stop early by breaking out of the loop. See ``_next_logits`` for what the cache does.
    """
    validate_sampling(temperature, top_k, top_p, max_new_tokens)
    if idx.dim() != 2 or idx.size(1) == 0:
        raise TinyLMError(f"prompt ids of shape {tuple(idx.shape)}: need (batch, >= 1 token)")
    B, T = idx.shape
    seq = torch.empty(B, T + max_new_tokens, dtype=torch.long, device=idx.device)  # (B, T+n)
    seq[:, :T] = idx
    cache = None
    if use_cache:
        cache = model.new_cache(B, idx.device, next(model.parameters()).dtype)

    def steps():
        for length in range(T, T + max_new_tokens):
            with eval_no_grad(model):
                logits = _next_logits(model, seq[:, :length], cache)
            next_ids = sample_next(logits, temperature, top_k, top_p, generator, suppress_ids)  # (B,)
            seq[:, length] = next_ids
            yield next_ids

    return steps()


def generate(
    model: LanguageModel,
    idx: torch.Tensor,
    max_new_tokens: int,
    stop_ids: Iterable[int] | None = None,
    **sampling,
) -> torch.Tensor:
    """Continue ``idx`` (B, T) by up to ``max_new_tokens`` ids; return (B, T + n).

    ``sampling``: keyword arguments of ``stream_tokens`` (temperature, top_k, top_p, generator,
    use_cache, suppress_ids). ``stop_ids``: a row is finished once it produces one of these ids (it is kept in
    the output); generation ends when every row is finished, and rows that finished earlier are
    padded with the stop id they produced, so cutting each row after its first stop id gives its
    text. The same ``generator`` state gives the same ids.
    """
    stop = torch.tensor(sorted(set(stop_ids or ())), dtype=torch.long, device=idx.device)
    done = torch.zeros(idx.size(0), dtype=torch.bool, device=idx.device)  # (B,)
    new = []
    for next_ids in stream_tokens(model, idx, max_new_tokens, **sampling):
        if new:
            next_ids = torch.where(done, new[-1], next_ids)  # finished rows repeat their stop id
        new.append(next_ids)
        if len(stop):
            done |= torch.isin(next_ids, stop)
            if done.all():
                break
    return torch.cat([idx, *(ids[:, None] for ids in new)], dim=1)  # (B, T + n)


# --------------------------------------------------------------------------------------------
# Text in, text out (one sample)


def stream_text(
    model: LanguageModel,
    tokenizer: Tokenizer,
    prompt_ids: list[int],
    max_new_tokens: int,
    stop: str | None = None,
    **sampling,
) -> Iterator[str]:
    """Yield the decoded continuation of one prompt piece by piece, as tokens arrive.

    Pieces are whole characters: with the byte tokenizer, the bytes of a half-finished UTF-8
    character are held back until it is complete. ``stop``: end right after this string appears
    in the generated text (it is included). ``sampling``: keyword arguments of ``stream_tokens``.
    """
    device = next(model.parameters()).device
    idx = torch.tensor([prompt_ids], dtype=torch.long, device=device)  # (1, T)
    new_ids = (int(next_ids[0]) for next_ids in stream_tokens(model, idx, max_new_tokens, **sampling))
    yield from text_pieces(tokenizer, new_ids, stop)
