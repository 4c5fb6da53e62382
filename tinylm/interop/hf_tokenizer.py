"""A tinylm tokenizer as a Hugging Face ``tokenizers.Tokenizer``: the same ids for a text, the same text for ids.

- char: a BPE model whose vocabulary is the characters and which has no merges, so every character is one
  token; ``Fuse`` joins the pieces back without spaces. A character outside the vocabulary is left out (a
  ``tokenizers`` model without an unknown token drops it), where tinylm refuses the text;
- byte: the 256 byte symbols of byte-level BPE (``tinylm.tokenizer.byte_symbols``), no merges;
- bpe: tinylm's BPE tokenizer already is one (its JSON).

``pretrained_tokenizer`` wraps it for ``transformers`` (what TransformerLens and SAELens take). tinylm's models
have no BOS, EOS or padding id, and ``transformers`` pads with one: ``<|endoftext|>`` is added after the model's
V ids (id V) as the end and padding token, so it never stands for a character (the TransformerLens export gives
it an embedding of zeros: ``tinylm.interop.transformer_lens``).
"""

from __future__ import annotations

from tinylm.tokenizer import Tokenizer, byte_symbols

END = "<|endoftext|>"  # transformers' end and padding token: id V, after the model's ids


def hf_tokenizer(tokenizer: Tokenizer):
    """``tokenizer`` as a ``tokenizers.Tokenizer`` with the same ids and decoding."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers

    if tokenizer.kind == "bpe":
        return HFTokenizer.from_str(tokenizer.json)
    if tokenizer.kind == "byte":
        backend = HFTokenizer(models.BPE(vocab={s: i for i, s in enumerate(byte_symbols())}, merges=[]))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        backend.decoder = decoders.ByteLevel()
        return backend
    backend = HFTokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(tokenizer.itos)}, merges=[]))
    backend.decoder = decoders.Fuse()  # the characters side by side, no space between tokens
    return backend


def pretrained_tokenizer(tokenizer: Tokenizer | None = None, file: str | None = None):
    """``tokenizer`` (or the ``tokenizer.json`` ``file`` that ``hf_tokenizer`` wrote) as a
    ``transformers.PreTrainedTokenizerFast`` (the ``interop`` extra), ``END`` its end and padding token (and
    TransformerLens's BOS). A text holding ``<|endoftext|>`` reads it as that one token, where tinylm reads its
    characters: TransformerLens prepends its BOS as that text. ``name_or_path`` and ``add_bos_token``: what
    TransformerLens looks up when a model is built again on the same tokenizer (SAELens's
    ``HookedSAETransformer``), which otherwise tries to download a tokenizer by that name."""
    from transformers import PreTrainedTokenizerFast

    source = {"tokenizer_file": file} if file else {"tokenizer_object": hf_tokenizer(tokenizer)}
    return PreTrainedTokenizerFast(**source, clean_up_tokenization_spaces=False, model_max_length=2**31 - 1,
                                   eos_token=END, pad_token=END, name_or_path="tinylm", add_bos_token=True)
