"""analyze.py on an encoder-decoder: its cross-attention heads, scored and switched off on source lines.

The sources are the lines of ``text``; their references the lines of ``target``, or, without one,
the model's own greedy translations (then a head's exact-match delta is the share of sources whose
translation changes when it is off). For each decoder layer's cross-attention head:

- ``entropy``: of its attention over the source, in nats (0: it reads one source symbol);
- ``ablation_loss_delta``: the teacher-forced loss on the references with the head zeroed (or set
  to its mean), minus the loss without;
- ``ablation_exact_match_delta``: the exact match of greedy translations with the head off, minus
  without (negative: the head is needed to translate).

``previous_token`` and ``induction`` are decoders' scores: null here. The logit lens reads the
decoder's residual stream on the first pair (``tinylm.analysis.lens``).
"""

from __future__ import annotations

from tinylm.analysis.heads import ABLATIONS, all_heads, entropy
from tinylm.analysis.hooks import ablated, head_means
from tinylm.analysis.probe import Probe
from tinylm.console import unescape
from tinylm.errors import TinyLMError
from tinylm.models.base import eval_no_grad
from tinylm.models.hook_points import hooked
from tinylm.tasks.translation.batches import collate
from tinylm.tasks.translation.decoding import encode_source, longest_source, translate, translation_scores

FIX = "remove them: analyze.py reads every character of text= and target="


def pairs_of(loaded, text: str, target: str | None) -> list[tuple[list[int], list[int]]]:
    """(source ids, reference ids) per line of ``text`` (``\\n`` between lines), the references from
    ``target``'s lines or the model's greedy translations."""
    model, tokenizer = loaded.model, loaded.tokenizer
    sources = [line for line in unescape(text).split("\n") if line]
    if not sources:
        raise TinyLMError('text is empty: pass source lines to translate, e.g. text="三千零五"')
    longest = longest_source(model)
    encoded = [encode_source(tokenizer, s, n, "error", longest, fix=FIX) for n, s in enumerate(sources, 1)]
    if target is None:
        references = translate(model, collate([(ids, []) for ids in encoded])[0])
    else:
        lines = [line for line in unescape(target).split("\n") if line]
        if len(lines) != len(sources):
            raise TinyLMError(f"target has {len(lines)} line(s) for {len(sources)} source line(s): one reference "
                              "per source, or target=null for the model's own translations")
        references = [encode_source(tokenizer, t, n, "error", model.config.block_size - 1, "target", FIX)
                      for n, t in enumerate(lines, 1)]
    return list(zip(encoded, references, strict=True))


def cross_head_table(model, pairs: list[tuple[list[int], list[int]]], ablation: str = "zero") -> list[dict]:
    """``heads.json``'s rows for an encoder-decoder: one per decoder layer and cross-attention head."""
    if ablation not in ABLATIONS:
        raise TinyLMError(f"ablation={ablation!r}: choose zero or mean")
    batch = collate(pairs)  # (B, S), (B, T), (B, T)
    probe = Probe.of_pair(model, *batch)
    attentions = model.attention_layers()["cross"]
    with eval_no_grad(model):
        cross = model.translation_maps(batch[0], batch[1])["cross"]  # per layer (B, h, T, S)
    means = head_means(attentions, probe.logits) if ablation == "mean" else None

    def scores() -> tuple[float, float]:
        exact, examples, _, _ = translation_scores(model, batch)
        return probe.loss(), exact / examples

    clean_loss, clean_exact = scores()
    rows = []
    for layer, head in all_heads(attentions):
        with hooked(ablated(attentions, [(layer, head)], means)):
            loss, exact = scores()
        rows.append({"layer": layer, "head": head, "attention": "cross", "previous_token": None, "induction": None,
                     "entropy": entropy(cross[layer].float())[head].item(), "ablation_loss_delta": loss - clean_loss,
                     "ablation_exact_match_delta": exact - clean_exact})
    return rows


def first_pair_probe(model, pairs) -> Probe:
    """The first pair, teacher-forced: what the logit lens reads."""
    return Probe.of_pair(model, *collate(pairs[:1]))
