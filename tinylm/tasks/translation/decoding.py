"""Translating: the decoding loops and the scores, for an encoder-decoder (``is_encoder_decoder``)
and for a decoder-only model trained on the same pairs (source + BEGIN, continued up to END).

- ``translate(model, src, ...)``: greedy (temperature 0) or sampled decoding of a batch of sources,
  with the options of ``tinylm.generation.sampling.sample_next``. The source is encoded once; with the
  cache, each step feeds the decoder only the newest symbol, and the cross-attention keys and
  values of the source are reused from ``model.encode`` at every step.
- ``continue_sources(model, prompts, ...)``: the same for a decoder-only model, through
  ``tinylm.generation.sampling.generate``.
- ``beam_search(model, src, beam_size)``: the most likely translations of one source, kept
  ``beam_size`` at a time, with either kind of model.
- ``edit_distance`` and ``translation_scores``: the exact match and character error rate that
  validation reports.
- ``translate_lines``: source lines in, one translation per line out (``generate.py``).
- ``translation_with_cross_attention``: one source's greedy translation and the cross-attention
  that wrote it (the explorer's translate route).

No loop ever writes PAD or BEGIN (``NEVER_WRITTEN``): their logits are masked out, so neither a
sample nor a beam can print them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from torch.nn import functional as F

from tinylm.errors import TinyLMError
from tinylm.generation.prompting import UNKNOWN_POLICIES
from tinylm.generation.sampling import generate, sample_next, suppress
from tinylm.models import LanguageModel
from tinylm.models.base import eval_no_grad
from tinylm.models.seq2seq import BEGIN_ID, END_ID, PAD_ID, Memory
from tinylm.tasks import is_encoder_decoder
from tinylm.tasks.translation.symbols import IGNORE
from tinylm.tokenizer import Tokenizer, say_skipped, unknown_characters

NEVER_WRITTEN = (PAD_ID, BEGIN_ID)  # symbols a translation never contains: masked out of every step


def _next_logits(model: LanguageModel, seq: torch.Tensor, memory, cache) -> torch.Tensor:
    """Logits (B, V) of the symbol after ``seq`` (B, L): only the new symbols with a cache, all without."""
    new = seq if cache is None else seq[:, cache.length :]
    return model.decode(new, memory, cache, last_only=True)[:, -1]  # (B, V)


def cut(ids: list[int]) -> list[int]:
    """A decoded row up to (without) its END symbol, padding dropped."""
    ids = ids[: ids.index(END_ID)] if END_ID in ids else ids
    return [i for i in ids if i != PAD_ID]


def translate(model: LanguageModel, src: torch.Tensor, temperature: float = 0.0, top_k: int | None = None,
              top_p: float | None = None, generator: torch.Generator | None = None,
              use_cache: bool = True) -> list[list[int]]:
    """The translations of ``src`` (B, S), padded with PAD_ID: one list of ids per row, without BEGIN/END.

    Each row stops at its END symbol, or after ``block_size`` symbols (the longest target the
    decoder can read back). Greedy by default; the same generator state gives the same samples.
    """
    B = src.size(0)
    with eval_no_grad(model):
        memory = model.encode(src)
        cache = model.new_cache(B, src.device, next(model.parameters()).dtype) if use_cache else None
        seq = torch.full((B, 1), BEGIN_ID, dtype=torch.long, device=src.device)  # (B, 1)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
        for _ in range(model.config.block_size):
            logits = _next_logits(model, seq, memory, cache)  # (B, V)
            next_ids = sample_next(logits, temperature, top_k, top_p, generator, NEVER_WRITTEN)
            next_ids = next_ids.masked_fill(done, PAD_ID)  # (B,): finished rows are padded
            seq = torch.cat([seq, next_ids[:, None]], dim=1)  # (B, L+1)
            done |= next_ids == END_ID
            if done.all():
                break
    return [cut(row[1:]) for row in seq.tolist()]


def expand_memory(memory: Memory, k: int) -> Memory:
    """One encoded source shared by ``k`` hypotheses: batch 1 -> k, without encoding it again."""
    keys_values = [(key.expand(k, -1, -1, -1), value.expand(k, -1, -1, -1)) for key, value in memory.keys_values]
    return Memory(keys_values, memory.pad_bias.repeat(k, 1, 1))  # bias (k*h, 1, S)


def beam_search(model: LanguageModel, src: torch.Tensor, beam_size: int, use_cache: bool = True) -> list[int]:
    """The most likely translation of one source ``src`` (1, S) that beam search finds.

    Each step extends every open hypothesis by every symbol and keeps the ``beam_size`` extensions
    with the highest total log-probability; one that ends (END, or the longest target the model
    can read back) moves to the finished list. Search stops once the best finished hypothesis
    scores at least as well as every open one (a score only falls as a hypothesis grows).
    ``beam_size=1`` is greedy decoding. An encoder-decoder encodes the source once and, with the
    cache, decodes one new symbol per step; a decoder-only model reads source + BEGIN + each
    hypothesis whole at every step (no cache: a hypothesis is at most ``block_size`` symbols).
    """
    with eval_no_grad(model):
        if is_encoder_decoder(model):
            memory = model.encode(src)
            cache = model.new_cache(1, src.device, next(model.parameters()).dtype) if use_cache else None

            def next_logits(seq: torch.Tensor) -> torch.Tensor:  # (K, L) -> (K, V)
                return _next_logits(model, seq, expand_memory(memory, seq.size(0)), cache)

            reorder, limit = None if cache is None else cache.keep_rows, model.config.block_size
        else:
            def next_logits(seq: torch.Tensor) -> torch.Tensor:  # (K, L) -> (K, V): source + BEGIN + hypothesis
                return model(torch.cat([src.expand(seq.size(0), -1), seq], dim=1), last_only=True)[0][:, -1]

            reorder, limit = None, model.config.block_size - src.size(1)
        return _beam(next_logits, reorder, limit, beam_size, src.device)


def _beam(next_logits: Callable[[torch.Tensor], torch.Tensor], reorder: Callable[[torch.Tensor], None] | None,
          limit: int, beam_size: int, device) -> list[int]:
    """Beam search over ``next_logits`` (hypotheses (K, L), each BEGIN + its symbols -> (K, V)), at most
    ``limit`` symbols a hypothesis; ``reorder(rows)`` keeps the cache of the hypotheses kept."""
    seq = torch.full((1, 1), BEGIN_ID, dtype=torch.long, device=device)  # (K, L): K open hypotheses
    scores = torch.zeros(1, device=device)  # (K,): the total log-probability of each
    finished: list[tuple[float, list[int]]] = []
    while True:
        logits = suppress(next_logits(seq), NEVER_WRITTEN)  # (K, V)
        V = logits.size(-1)
        total = (scores[:, None] + F.log_softmax(logits.float(), dim=-1)).flatten()  # (K*V,)
        best, flat = total.topk(min(beam_size, int(total.isfinite().sum())))  # (k,) each, best first
        kept = []  # (score, row, symbol) of the hypotheses still open
        for score, row, symbol in zip(best.tolist(), (flat // V).tolist(), (flat % V).tolist(), strict=True):
            if symbol == END_ID or seq.size(1) >= limit:
                finished.append((score, seq[row, 1:].tolist() + [symbol]))
            else:
                kept.append((score, row, symbol))
        if not kept or max((score for score, _ in finished), default=-math.inf) >= kept[0][0]:
            break
        rows = torch.tensor([row for _, row, _ in kept], device=device)  # (K',)
        symbols = torch.tensor([[symbol] for _, _, symbol in kept], device=device)  # (K', 1)
        seq = torch.cat([seq[rows], symbols], dim=1)  # (K', L+1)
        scores = torch.tensor([score for score, _, _ in kept], device=device)  # (K',)
        if reorder is not None:
            reorder(rows)
    return cut(max(finished, key=lambda f: f[0])[1])


# --------------------------------------------------------------------------------------------
# Scores


def edit_distance(a: list[int], b: list[int]) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions turning ``a`` into ``b``."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


def continue_sources(model: LanguageModel, prompts: list[list[int]], temperature: float = 0.0,
                     **sampling) -> list[list[int]]:
    """A decoder-only model's translations: each prompt (source + BEGIN) continued up to END, greedy by
    default (``sampling``: the other options of ``tinylm.generation.sampling.stream_tokens``)."""
    device = next(model.parameters()).device
    outputs = []
    for ids in prompts:
        idx = torch.tensor([ids], dtype=torch.long, device=device)  # (1, P)
        out = generate(model, idx, model.config.block_size - len(ids) + 1, stop_ids=[END_ID],
                       temperature=temperature, suppress_ids=NEVER_WRITTEN, **sampling)
        outputs.append(cut(out[0, len(ids) :].tolist()))
    return outputs


def translation_scores(model: LanguageModel, batch) -> tuple[int, int, int, int]:
    """Greedy translations of a batch of pairs against its references: (exact, examples, character edits,
    reference characters). Exact match is exact / examples; the character error rate is edits / reference characters.

    An encoder-decoder's batch is (source, target_in, target_out); a decoder-only model's is
    (idx, targets) of ``tinylm.tasks.translation.batches.collate_decoder_only``, whose first scored position is BEGIN.
    """
    if is_encoder_decoder(model):
        src, _, targets = batch  # (B, S), (B, T), (B, T): targets end with END, then padding
        predictions, references = translate(model, src), [cut(row) for row in targets.tolist()]
    else:
        prompts, references = [], []
        for ids, labels in zip(batch[0].tolist(), batch[1].tolist(), strict=True):  # (L,) each
            begin = next(i for i, label in enumerate(labels) if label != IGNORE)
            prompts.append(ids[: begin + 1])
            references.append(cut(labels[begin:]))
        predictions = continue_sources(model, prompts)
    exact = sum(p == r for p, r in zip(predictions, references, strict=True))
    edits = sum(edit_distance(p, r) for p, r in zip(predictions, references, strict=True))
    return exact, len(references), edits, sum(len(r) for r in references)


# --------------------------------------------------------------------------------------------
# Text in, text out (generate.py)


def longest_source(model: LanguageModel) -> int:
    """The longest source the model translates, as training kept the pairs: an encoder-decoder reads
    ``block_size`` source symbols; a decoder-only model reads source + BEGIN + target in its block."""
    return model.config.block_size - (0 if is_encoder_decoder(model) else 2)


SKIP_FIX = "remove them or pass unknown=skip"  # generate.py's advice: the command that takes unknown=
SIDES = {"source": "translates sources", "target": "writes targets"}


def encode_source(tokenizer: Tokenizer, line: str, number: int, unknown: str, longest: int, side: str = "source",
                  fix: str = SKIP_FIX) -> list[int]:
    """The ids of ``side`` line ``number`` (a source, or a target: a reference translation; none for an empty
    line), or one TinyLMError naming that line and ``fix``, the advice that fits the caller. ``unknown="skip"``
    leaves out the characters the vocabulary lacks and says which on stderr."""
    what = f"{side} line {number}"
    missing = tokenizer.unknown(line)
    if missing and unknown == "error":
        raise unknown_characters(tokenizer, what, missing, fix)
    say_skipped(tokenizer, what, missing)
    ids = tokenizer.encode("".join(c for c in line if c not in missing))
    if len(ids) > longest:
        raise TinyLMError(f"{what} is {len(ids)} characters long but the model {SIDES[side]} "
                          f"of at most {longest} characters: split it or shorten it")
    return ids


def translate_lines(model: LanguageModel, tokenizer: Tokenizer, sources: list[str], unknown: str = "error",
                    beam_size: int = 1, **sampling) -> Iterator[str]:
    """One translation per source, in order; an empty source (or one emptied by ``unknown="skip"``) gives
    an empty line, so the output stays aligned. Every source is checked before the first is translated.

    ``beam_size`` > 1: beam search (deterministic; the sampling options are not used). Otherwise
    ``sampling`` (temperature, top_k, top_p, generator, use_cache): ``translate`` for an
    encoder-decoder, ``continue_sources`` for a decoder-only model.
    """
    if unknown not in UNKNOWN_POLICIES:
        raise TinyLMError(f"unknown={unknown!r}: choose one of {', '.join(UNKNOWN_POLICIES)}")
    longest = longest_source(model)
    encoded = [encode_source(tokenizer, s, n, unknown, longest) for n, s in enumerate(sources, 1)]
    device = next(model.parameters()).device
    for ids in encoded:
        if not ids:
            yield ""
            continue
        src = torch.tensor([ids], dtype=torch.long, device=device)  # (1, S)
        if beam_size > 1:
            out = beam_search(model, src, beam_size, sampling.get("use_cache", True))
        elif is_encoder_decoder(model):
            out = translate(model, src, **sampling)[0]
        else:
            out = continue_sources(model, [[*ids, BEGIN_ID]], **sampling)[0]
        yield tokenizer.decode(out)


def translation_with_cross_attention(model: LanguageModel, ids: list[int]) -> tuple[list[int], list | None]:
    """The greedy translation of one source ``ids``, and what an encoder-decoder's decoder layers attended to
    while writing it: per layer the cross-attention (1, h, T, S), row i the step that wrote symbol i (the last
    row END), columns the source's symbols. A decoder-only model continues source + BEGIN: no cross-attention
    (None)."""
    with torch.inference_mode():
        if not is_encoder_decoder(model):
            return continue_sources(model, [[*ids, BEGIN_ID]])[0], None
        src = torch.tensor([ids])  # (1, S)
        written = translate(model, src)[0][: model.config.block_size - 1]  # room for BEGIN in front
        tgt = torch.tensor([[BEGIN_ID, *written]])  # (1, T): what the decoder reads
        return written, model.translation_maps(src, tgt)["cross"]
