"""A tinylm GPT as a TransformerLens ``HookedTransformer``: the same logits and the same hook points' values.

tinylm's GPT already is the shape ``HookedTransformer`` holds (pre-norm blocks, ReLU MLP, an unembedding with
a bias), so the conversion only re-slices the weights:

    tinylm                              TransformerLens
    token_embedding.weight  (V, C)  ->  embed.W_E            (V + 1, C): a zero row for <|endoftext|> (id V)
    position_embedding      (T, C)  ->  pos_embed.W_pos      (T, C): sin/cos as a fixed table; none with rope
    blocks.l.attn.qkv.weight (3C, C)->  blocks.l.attn.W_Q/W_K/W_V (h, C, hs) each, b_Q/b_K/b_V zeros
    blocks.l.attn.proj       (C, C) ->  blocks.l.attn.W_O    (h, hs, C), b_O
    blocks.l.ffwd.fc / proj         ->  blocks.l.mlp.W_in (C, 4C), b_in / W_out (4C, C), b_out
    ln1, ln2, ln_f                  ->  ln1, ln2, ln_final (w, b; w only for RMSNorm)
    lm_head                 (V, C)  ->  unembed.W_U (C, V), b_U

RoPE (the halves pairing, base 10000: ``rotary_adjacent_pairs=False``), RMSNorm, ReLU², QK-norm and the logit
soft-cap have TransformerLens settings of their own. QK-norm beside LayerNorm is refused: TransformerLens uses
one ``eps`` for both, and tinylm's QK-norm has float32's. So is a model class of the program's own, and a
model whose converted logits are not tinylm's (checked on every conversion). The weights are loaded as they
are (no folding or centering), so every hook point holds what tinylm's of the same name holds;
``model.process_weights_()`` folds them afterwards into TransformerLens's usual form.

transformers pads with a token, and TransformerLens makes it the BOS token too: ``<|endoftext|>``, id V, after
the model's ids (``tinylm.interop.hf_tokenizer``). Its embedding row is zero (``d_vocab`` V + 1), so a padded
batch or a prepended BOS runs; the model never saw it in training, and ``d_vocab_out`` stays V.

An exported folder (``save``) holds ``config.json`` (the ``HookedTransformerConfig``), ``model.safetensors``
(TransformerLens's state dict) and the tokenizer; ``load`` reads it back with TransformerLens alone.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch

from tinylm.errors import TinyLMError
from tinylm.textfile import capped_file, read_json
from tinylm.values import SHORT, one_line

INSTALL = 'pip install -e ".[interop]"'
CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE = "config.json", "model.safetensors", "tokenizer.json"
MAX_CONFIG_MIB = 64  # a config or tokenizer larger than this is not one tinylm wrote
FORMAT = "transformer_lens"  # config.json's "tinylm_export", what ``load`` checks
TOLERANCE = 1e-4  # the most an exported model's logits may differ from tinylm's (float32)


def require_transformer_lens():
    """The ``transformer_lens`` module, or one TinyLMError naming the extra to install."""
    try:
        import transformer_lens
    except ImportError:
        raise TinyLMError(f"TransformerLens is not installed: {INSTALL} (transformer-lens 3.x, whose "
                          "HookedTransformer tinylm's GPT converts to)") from None
    if not hasattr(transformer_lens, "HookedTransformer"):
        raise TinyLMError(f"transformer-lens {getattr(transformer_lens, '__version__', '?')} has no HookedTransformer "
                          f"(removed in 4.x): {INSTALL} installs 3.x")
    return transformer_lens


def refusal(model) -> str | None:
    """Why ``model`` has no exact TransformerLens twin (one line naming the option), or None."""
    config = model.config
    from tinylm.models import model_config

    if not model.has_attention or model.kind != "decoder" or getattr(config, "arch", None) != "gpt":
        arch = str(getattr(config, "arch", type(model).__name__))
        return (f"{'an' if arch[:1] in 'aeiolr' else 'a'} {arch} model has no TransformerLens twin: "
                "TransformerLens's HookedTransformer holds decoder-only Transformers, model=gpt")
    if "_target_" in model_config(model):  # a class its arch does not name: a model of the program's own
        return (f"a model class of your own ({type(model).__name__}) has no known TransformerLens twin: "
                "TransformerLens's HookedTransformer holds tinylm's GPT, model=gpt")
    if config.qk_norm and config.norm == "layernorm":
        return ("model.qk_norm=true with model.norm=layernorm has no exact TransformerLens twin: it uses one eps "
                "for LayerNorm (1e-5) and QK-norm (tinylm's: float32's); use model.norm=rmsnorm with qk_norm")
    return None


def hooked_config(model) -> dict:
    """The ``HookedTransformerConfig`` arguments of tinylm GPT ``model``."""
    c = model.config
    rope = c.pos_encoding == "rope"
    config = {
        "d_model": c.n_embd, "n_layers": c.num_layers, "n_heads": c.num_heads, "d_head": c.head_size,
        "d_mlp": 4 * c.n_embd, "d_vocab": c.vocab_size + 1, "d_vocab_out": c.vocab_size, "n_ctx": c.block_size,
        "act_fn": "relu2" if c.activation == "relu2" else "relu",
        "normalization_type": "RMS" if c.norm == "rmsnorm" else "LN",
        "eps": torch.finfo(torch.float32).eps if c.norm == "rmsnorm" else 1e-5,  # nn.RMSNorm's eps=None, nn.LayerNorm's
        "positional_embedding_type": "rotary" if rope else "standard",
        "use_qk_norm": bool(c.qk_norm),
        "default_prepend_bos": False,  # tinylm's models have no BOS token
        "model_name": "tinylm-gpt", "original_architecture": "tinylm",
        "device": "cpu",  # where the weights are: else TransformerLens sends the tokens to a GPU it finds
    }
    if rope:
        config.update(rotary_dim=c.head_size, rotary_base=10000, rotary_adjacent_pairs=False)
    if c.logit_softcap is not None:
        config["output_logits_soft_cap"] = float(c.logit_softcap)
    return config


def hooked_state_dict(model) -> dict[str, torch.Tensor]:
    """tinylm GPT ``model``'s weights under TransformerLens's names and shapes (see the module's table)."""
    c, h, hs, C = model.config, model.config.num_heads, model.config.head_size, model.config.n_embd
    rms = c.norm == "rmsnorm"

    def norm(prefix: str, layer) -> dict[str, torch.Tensor]:
        return {f"{prefix}.w": layer.weight} | ({} if rms else {f"{prefix}.b": layer.bias})

    padding = torch.zeros(1, C, device=model.token_embedding.weight.device)  # <|endoftext|>: id V, never trained
    state = {"embed.W_E": torch.cat([model.token_embedding.weight, padding])}  # (V + 1, C)
    if c.pos_encoding != "rope":
        positions = torch.arange(c.block_size)
        state["pos_embed.W_pos"] = model.position_embedding(positions)  # the learned table, or sin/cos
    for i, block in enumerate(model.blocks):
        p, attn = f"blocks.{i}", block.attn
        q, k, v = attn.qkv.weight.split(C, dim=0)  # 3 x (C_out, C_in)
        for name, weight in (("Q", q), ("K", k), ("V", v)):
            state[f"{p}.attn.W_{name}"] = weight.view(h, hs, C).transpose(1, 2)  # (h, C, hs)
            state[f"{p}.attn.b_{name}"] = torch.zeros(h, hs)  # tinylm's projection has no bias
        state[f"{p}.attn.W_O"] = attn.proj.weight.T.reshape(h, hs, C)  # (h, hs, C): each head's rows of proj
        state[f"{p}.attn.b_O"] = attn.proj.bias
        if c.qk_norm:  # tinylm's QK-norm has no gain: TransformerLens's RMSNorm with a gain of ones
            state[f"{p}.attn.q_norm.w"] = state[f"{p}.attn.k_norm.w"] = torch.ones(hs)
        state |= norm(f"{p}.ln1", block.ln1) | norm(f"{p}.ln2", block.ln2)
        state[f"{p}.mlp.W_in"], state[f"{p}.mlp.b_in"] = block.ffwd.fc.weight.T, block.ffwd.fc.bias  # (C, 4C)
        state[f"{p}.mlp.W_out"], state[f"{p}.mlp.b_out"] = block.ffwd.proj.weight.T, block.ffwd.proj.bias  # (4C, C)
    state |= norm("ln_final", model.ln_f)
    state["unembed.W_U"], state["unembed.b_U"] = model.lm_head.weight.T, model.lm_head.bias  # (C, V)
    return {name: tensor.detach().cpu().clone().contiguous().float() for name, tensor in state.items()}


def build_hooked(config: dict, state: dict[str, torch.Tensor], tokenizer):
    """A ``HookedTransformer`` of ``config`` holding ``state`` as it is, with ``tokenizer`` (transformers')."""
    tl = require_transformer_lens()
    with warnings.catch_warnings():  # 3.x's note that 4.0 drops HookedTransformer: why the extra pins 3.x
        warnings.filterwarnings("ignore", "HookedTransformer is deprecated", DeprecationWarning)
        model = tl.HookedTransformer(tl.HookedTransformerConfig(**config), tokenizer=tokenizer, move_to_device=False)
    model.load_and_process_state_dict(state, fold_ln=False, center_writing_weights=False, center_unembed=False,
                                      fold_value_biases=False)
    return model.eval()


def to_transformer_lens(model, tokenizer):
    """tinylm GPT ``model`` and its tokenizer as a TransformerLens ``HookedTransformer`` (eval mode, CPU, float32),
    or one TinyLMError naming what has no twin there."""
    if problem := refusal(model):
        raise TinyLMError(problem)
    require_transformer_lens()
    from tinylm.interop.hf_tokenizer import pretrained_tokenizer

    hooked = build_hooked(hooked_config(model), hooked_state_dict(model), pretrained_tokenizer(tokenizer))
    difference(model, hooked)  # a forward of its own (a subclass's, say) would give other logits: refused
    return hooked


def save(model, tokenizer, folder: Path) -> Path:
    """Write tinylm GPT ``model`` as a TransformerLens folder (``load`` reads it): config, weights, tokenizer."""
    if problem := refusal(model):
        raise TinyLMError(problem)
    from safetensors.torch import save as safetensors_bytes

    from tinylm.interop.hf_tokenizer import hf_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps({"tinylm_export": FORMAT, **hooked_config(model)}, indent=2) + "\n")
    (folder / WEIGHTS_FILE).write_bytes(safetensors_bytes(hooked_state_dict(model), metadata={"format": "pt"}))
    hf_tokenizer(tokenizer).save(str(folder / TOKENIZER_FILE))
    return folder


def load(folder: str | Path):
    """The ``HookedTransformer`` a ``python export.py format=transformer_lens`` folder holds (TransformerLens,
    safetensors and transformers only; no tinylm model code): ``tinylm.load_transformer_lens(folder)``. What
    cannot be read is one TinyLMError line."""
    folder = Path(folder)
    remedy = "write one with `python export.py format=transformer_lens`"
    try:
        config = read_json(folder / CONFIG_FILE, CONFIG_FILE, MAX_CONFIG_MIB, links=False)
    except TinyLMError as e:
        raise TinyLMError(f"{folder} is not a TransformerLens export of tinylm ({one_line(e, SHORT)}): "
                          f"{remedy}") from None
    if not isinstance(config, dict) or config.pop("tinylm_export", None) != FORMAT:
        raise TinyLMError(f"{folder}/{CONFIG_FILE} is not a TransformerLens export of tinylm: {remedy}")
    require_transformer_lens()
    from safetensors.torch import load_file

    from tinylm.interop.hf_tokenizer import pretrained_tokenizer

    try:
        capped_file(folder / TOKENIZER_FILE, TOKENIZER_FILE, MAX_CONFIG_MIB, links=False)
        tokenizer = pretrained_tokenizer(file=str(folder / TOKENIZER_FILE))
        return build_hooked(config, load_file(folder / WEIGHTS_FILE), tokenizer)
    except Exception as e:  # TransformerLens, safetensors and transformers raise many kinds for a damaged folder
        raise TinyLMError(f"{folder} holds a damaged TransformerLens export ({type(e).__name__}: "
                          f"{one_line(e, SHORT)}): {remedy}") from None


def difference(model, hooked) -> float:
    """The largest difference between tinylm ``model``'s logits and TransformerLens model ``hooked``'s, on a text
    of the model's own ids (every id once, as many as fit); one TinyLMError when over ``TOLERANCE``."""
    device = next(model.parameters()).device
    ids = torch.arange(model.config.vocab_size)[: model.config.block_size][None]  # (1, T)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            ours, theirs = model(ids.to(device))[0].cpu(), hooked(ids)  # (1, T, V) each
    finally:
        model.train(was_training)
    found = (ours - theirs).abs().max().item()
    if not found <= TOLERANCE:
        raise TinyLMError(f"the TransformerLens model gives logits {found:.1e} away from this {type(model).__name__}'s "
                          f"(more than {TOLERANCE:.0e}): its forward is not the one TransformerLens holds")
    return found


def compare(model, folder: Path) -> float:
    """``difference`` between ``model`` and the TransformerLens model ``folder`` holds: what an export is checked
    with."""
    return difference(model, load(folder))
