"""The text task: a language model continues a text (``data=corpus``, ``data=tinyshakespeare``, a file)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch

from tinylm.console import Sampler, print_samples
from tinylm.errors import TinyLMError
from tinylm.plots import figures as plotting
from tinylm.tasks import is_encoder_decoder
from tinylm.tasks.base import Task, bits_per_char
from tinylm.tokenizer import unknown_characters


class TextTask(Task):
    name = "text"
    data_target = "tinylm.tasks.text.data.TextDataModule"
    views = ("sample_text", "attention_maps", "next_token_probes", "head_scores")

    def validation_text(self, data: dict) -> str | None:
        from tinylm.tasks.data_file import DEFAULT_MAX_MIB, default_corpus_path
        from tinylm.tasks.text.corpus import Corpus, split_text

        corpus = Corpus(Path(data.get("path") or default_corpus_path()), data.get("encoding") or "utf-8",
                        data.get("errors") or "strict", data.get("repeat") or 1)
        corpus.check_cap(data.get("max_mib") or DEFAULT_MAX_MIB)
        return split_text(corpus.read(), data.get("val_fraction", 0.1))[1]

    def config_problems(self, cfg, model_class) -> list[str]:
        if is_encoder_decoder(model_class):
            return [f"model.arch={cfg.model.arch} translates source<TAB>target pairs: add data=pairs (data.path=FILE, "
                    "or none for the generated demo), or use experiment=numbers_zh"]
        return []

    def generate(self, cfg, loaded, prompt: str, seed: int) -> None:
        """The sampled continuations of ``prompt``, as from an ONNX file (``print_samples``)."""
        from tinylm.generation.sampling import stream_text

        stream = partial(stream_text, loaded.model, loaded.tokenizer, generator=torch.Generator().manual_seed(seed),
                         use_cache=cfg.use_cache)
        print_samples(cfg, Sampler(loaded.path, loaded.tokenizer, loaded.global_step, loaded.model.num_params(),
                                   stream, loaded.why), prompt, seed)

    def figures(self, loaded, ids: list[int], note: str):
        """``attention_layer<N>``: the attention over ``ids``, a panel per head, as ``AttentionMaps`` logs it."""
        loaded.require_attention()
        labels = plotting.token_labels(loaded.tokenizer, ids)
        for layer, weights in enumerate(plotting.attention_weights(loaded.model, torch.tensor(ids))):
            yield f"attention_layer{layer}", plotting.attention_figure(weights, labels, layer, note=note)

    def evaluate(self, cfg, loaded, datamodule) -> tuple[str, dict]:
        """Every position of the validation split (``split=val``) or of the whole text, in windows of
        block_size starting every ``stride`` tokens (``tinylm.tasks.text.evaluation``)."""
        from tinylm.tasks.text.evaluation import score_text

        block_size = loaded.model.config.block_size
        stride = max(block_size // 2, 1) if cfg.stride is None else cfg.stride
        if stride > block_size:
            raise TinyLMError(f"stride={stride} is larger than the model's block_size={block_size}: positions "
                              f"between windows would be skipped; pass stride=1 .. {block_size}")
        train_text, val_text = datamodule.read_split()
        text = val_text if cfg.split == "val" else train_text + val_text
        what = (f"the validation split (the last data.val_fraction={datamodule.val_fraction:g}) of {datamodule.path}"
                if cfg.split == "val" else f"all of {datamodule.path}")
        if not text:
            raise TinyLMError(f"{what} is empty (of {len(train_text):,} characters): pass split=all, "
                              "a larger data.val_fraction or a longer text")
        ids = text_ids(loaded.tokenizer, text, what)
        if len(ids) <= block_size:
            raise TinyLMError(f"{what} has {len(ids)} tokens, fewer than one window of block_size+1={block_size + 1}: "
                              "score a longer text (split=all, a larger data.val_fraction or another data.path)")
        loss, tokens = score_text(loaded.model, ids, stride, cfg.batch_size)
        chars_per_token = len(text) / len(ids)  # as training's val_chars_per_token
        line = f"{what}: {tokens:,} positions in windows of {block_size} tokens, stride {stride}"
        return line, {"loss": loss, "bpc": bits_per_char(loss, chars_per_token), "tokens": tokens, "stride": stride,
                      "block_size": block_size, "chars_per_token": chars_per_token}


def text_ids(tokenizer, text: str, source: str):
    """``text`` encoded with the checkpoint's tokenizer, or one line naming the characters it lacks."""
    from tinylm.tasks.text.data import encode_array

    try:
        return encode_array(tokenizer, text)
    except ValueError:
        raise unknown_characters(tokenizer, source, tokenizer.unknown(text),
                                 "score a text in the language it was trained on, or remove them") from None
