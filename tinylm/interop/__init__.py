"""tinylm's models in the ecosystem's formats (docs/interop.md):

- ``saved``: the Hugging Face layout (``model.safetensors``, ``config.json``, the tokenizer), which
  ``LM.save_pretrained`` writes and ``tinylm.load(folder)`` and every command read back;
- ``hf_tokenizer``: a tinylm tokenizer as a Hugging Face ``tokenizers`` object, the same ids and text;
- ``transformer_lens``: a GPT as a TransformerLens ``HookedTransformer`` (``lm.to_transformer_lens()``,
  ``export.py format=transformer_lens``) and back from its folder (``load_transformer_lens``).
"""
