"""The translation task: a model learns source<TAB>target pairs (``data=pairs``), an encoder-decoder
(``model=seq2seq``) or a decoder-only model reading each pair as one sequence source + BEGIN + target."""

from __future__ import annotations

import sys

import torch

from tinylm.console import printable, say_checkpoint
from tinylm.errors import TinyLMError
from tinylm.models.base import eval_no_grad
from tinylm.models.seq2seq import PAD_ID
from tinylm.tasks import is_encoder_decoder
from tinylm.tasks.base import Task, bits_per_char
from tinylm.tasks.translation.decoding import translate_lines, translation_scores
from tinylm.tasks.translation.figures import translation_figures
from tinylm.tasks.translation.symbols import IGNORE


class TranslationTask(Task):
    name = "translation"
    data_target = "tinylm.tasks.translation.data.PairDataModule"
    views = ("translation_samples", "translation_maps")
    headline = "exact_match"
    score_words = {"exact_match": "exact match", "cer": "CER"}
    export_problem = ("was trained on translation pairs (data=pairs), and an ONNX export only continues text: "
                      "translate with `python generate.py ckpt_path=<that checkpoint>`")

    def data_arguments(self, model_class) -> dict:
        return {"decoder_only": not is_encoder_decoder(model_class)}

    def validation_counts(self, model, batch) -> tuple[int, int, int, int]:
        """(exact, examples, character edits, reference characters) of the batch's greedy translations."""
        return translation_scores(model, batch)

    def validation_scores(self, counts) -> dict[str, float]:
        exact_match, cer = rates(counts)
        return {"exact_match": exact_match, "cer": cer}

    def generate(self, cfg, loaded, text: str, seed: int) -> None:
        """One translation per line of ``text``, one line each, in order; an empty line gives an empty line."""
        if cfg.num_samples != 1:
            raise TinyLMError(f"num_samples={cfg.num_samples}: a translation model prints one translation per "
                              "source line; pass num_samples=1 (or sample again with another seed)")
        if not text:
            raise TinyLMError("nothing to translate: pass prompt=SOURCE, or prompt_file=FILE with one source a line")
        sources = text.split("\n")
        if len(sources) > 1 and sources[-1] == "":  # the final newline of a file ends its last line
            sources.pop()
        say_checkpoint(loaded.path, loaded.why, loaded.global_step, loaded.tokenizer.vocab_size,
                       loaded.model.num_params(), seed)
        translations = translate_lines(loaded.model, loaded.tokenizer, sources, cfg.unknown, cfg.beam_size,
                                       temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                                       generator=torch.Generator().manual_seed(seed), use_cache=cfg.use_cache)
        for translation in translations:
            sys.stdout.write(printable(translation) + "\n")
            sys.stdout.flush()

    def figures(self, loaded, ids: list[int], note: str):
        """``encoder_layer<N>`` and ``cross_attention_layer<N>`` of the source ``ids`` (a decoder-only model:
        ``pair_attention_layer<N>``), as ``TranslationMaps`` logs them."""
        loaded.require_attention()
        return translation_figures(loaded.model, loaded.tokenizer, ids, note=note)

    def evaluate(self, cfg, loaded, datamodule) -> tuple[str, dict]:
        """Loss, exact match and character error rate of greedy translations on every validation pair
        (``split=val``) or on every pair."""
        datamodule.prepare()
        if datamodule.tokenizer.state() != loaded.tokenizer.state():
            raise TinyLMError(f"the pairs of {datamodule.source_name} have other characters than the checkpoint's "
                              "vocabulary: score it on the pairs it was trained on (data.path=...)")
        examples = (datamodule.val_examples if cfg.split == "val"
                    else datamodule.train_examples + datamodule.val_examples)
        scores = score_pairs(loaded.model, examples, datamodule.collate, cfg.batch_size)
        scores["bpc"] = bits_per_char(scores["loss"], datamodule.val_chars_per_token)
        what = "the validation pairs" if cfg.split == "val" else "all pairs"
        return f"{what} of {datamodule.source_name}: {scores['pairs']:,} pairs, greedy translations", scores


def score_pairs(model, examples: list, collate, batch_size: int) -> dict:
    """Loss over every scored target symbol of ``examples`` (source ids, target ids), and the exact
    match and character error rate of greedy translations (as validation scores them)."""
    loss, tokens, counts = 0.0, 0, []
    with eval_no_grad(model):
        for i in range(0, len(examples), batch_size):
            batch = collate(examples[i : i + batch_size])
            targets = batch[-1]  # padded with PAD_ID (encoder-decoder) or IGNORE (decoder-only): neither scored
            scored = int(((targets != PAD_ID) & (targets != IGNORE)).sum())
            loss += float(model.loss(batch)) * scored
            tokens += scored
            counts.append(translation_scores(model, batch))
    totals = tuple(sum(c) for c in zip(*counts, strict=True))
    exact_match, cer = rates(totals)
    return {"loss": loss / tokens, "tokens": tokens, "pairs": totals[1], "exact_match": exact_match, "cer": cer}


def rates(counts: tuple[int, int, int, int]) -> tuple[float, float]:
    """(exact match, character error rate) of summed counts (exact, examples, character edits, reference
    characters), as ``translation_scores`` counts them."""
    exact, examples, edits, chars = counts
    return exact / examples, edits / max(chars, 1)
