"""A tinylm tokenizer as a Hugging Face ``tokenizers.Tokenizer``: the same ids for a text, the same text for ids.

- char: a BPE model whose vocabulary is the characters and which has no merges, so every character is one
  token; ``Fuse`` joins the pieces back without spaces. A character outside the vocabulary is left out (a
  ``tokenizers`` model without an unknown token drops it), where tinylm refuses the text;
- byte: the 256 byte symbols of byte-level BPE (``tinylm.tokenizer.byte_symbols``), no merges;
- bpe: tinylm's BPE tokenizer already is one (its JSON).

``pretrained_tokenizer`` wraps it for ``transformers`` (what TransformerLens and SAELens take). tinylm's models
have no BOS, EOS or padding id, and ``transformers`` pads with one: ``<|endoftext|>`` is added after the model's
V ids (id V) as the end and padding token, so it never stands for a character (a model reads no id V: don't
feed it padded batches' pad positions).
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


def pretrained_tokenizer(tokenizer: Tokenizer):
    """``tokenizer`` as a ``transformers.PreTrainedTokenizerFast`` (needs the ``interop`` extra)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=hf_tokenizer(tokenizer), clean_up_tokenization_spaces=False,
                                   model_max_length=2**31 - 1, eos_token=END, pad_token=END)
