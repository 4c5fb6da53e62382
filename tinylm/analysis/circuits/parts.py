"""The pieces every circuit reads, found through the models' interface (``attention_layers``,
``residual_layers``, ``token_embeddings``, ``hook_points``), never by asking which class a model is.

Row-vector convention throughout, as the models compute: a residual vector x (C,) is read by a head as
x W_Q (C, hs), x W_K, x W_V, and the head writes z W_O (hs, C). For head j of an attention whose fused
``qkv`` Linear has weight (3C, C): W_Q = qkv.weight[j*hs:(j+1)*hs].T, W_K the rows C + ..., W_V the rows
2C + ..., and W_O = proj.weight[:, j*hs:(j+1)*hs].T. The output head W_U is ``lm_head.weight`` (V, C).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from tinylm.errors import TinyLMError

WHAT_APPLIES = ("has no attention heads and no residual stream of named parts: direct logit attribution, OV/QK "
                "circuits, composition scores and MLP neurons are a Transformer's; lm.score and lm.generate "
                "(evaluate.py and generate.py) apply to it")


@dataclass(frozen=True)
class HeadPlace:
    """One attention module of one layer on the residual stream the logits read."""

    prefix: str  # "" for self-attention, "cross" for an encoder-decoder's cross-attention
    layer: int
    module: nn.Module  # has qkv, proj, num_heads, head_size, hook_z
    norm: nn.Module  # the norm whose output it reads (its queries; with "cross", its keys and values read memory)
    block: nn.Module  # the residual block it sits in

    def name(self, head: int) -> str:
        return f"{self.prefix}L{self.layer}H{head}"


def host(t: torch.Tensor) -> torch.Tensor:
    """A weight or an activation as the circuits compute with it: detached, float32, on the CPU (the matrices are
    small; the model itself may run anywhere)."""
    return t.detach().float().cpu()


def require_heads(model) -> None:
    """One TinyLMError for a model without attention (the LSTM/GRU), saying what applies."""
    if not getattr(model, "has_attention", False) or not model.attention_layers():
        raise TinyLMError(f"this {model.config.arch} model {WHAT_APPLIES}")


def _norm_before(block: nn.Module, attention: nn.Module) -> nn.Module:
    """The norm a block applies to the stream before ``attention``: the block's norms and attentions
    alternate in the order the block defines them (ln1 attn ln2 ffwd; ln1 self_attn ln2 cross_attn ln3 ffwd)."""
    last = None
    for child in block.children():
        if child is attention:
            return last
        if hasattr(child, "normalized_shape"):
            last = child
    raise TinyLMError("the attention module is not a child of its block")


def places(model) -> list[HeadPlace]:
    """Every attention module on the residual stream the output head reads, layer by layer (self before
    cross): a decoder's "self" layers; an encoder-decoder's "decoder" and "cross" layers."""
    require_heads(model)
    layers = model.attention_layers()
    blocks = model.residual_layers()
    kinds = [("", layers["self"])] if "self" in layers else [("", layers.get("decoder", [])),
                                                              ("cross", layers.get("cross", []))]
    found = []
    for layer, block in enumerate(blocks):
        for prefix, modules in kinds:
            if layer < len(modules):
                found.append(HeadPlace(prefix, layer, modules[layer], _norm_before(block, modules[layer]), block))
    return found


def weights(module: nn.Module, head: int) -> dict[str, torch.Tensor]:
    """Head ``head``'s W_Q, W_K, W_V (C, hs) and W_O (hs, C), detached, float."""
    hs, W = module.head_size, host(module.qkv.weight)  # (3C, C)
    C = W.size(1)
    rows = slice(head * hs, (head + 1) * hs)
    return {"Q": W[rows].T, "K": W[C:][rows].T, "V": W[2 * C:][rows].T,
            "O": host(module.proj.weight)[:, rows].T}


def centers(norm: nn.Module) -> bool:
    """Whether a norm subtracts the mean over C (a LayerNorm) or not (an RMSNorm)."""
    return isinstance(norm, nn.LayerNorm)


def gain(norm: nn.Module) -> torch.Tensor:
    w = getattr(norm, "weight", None)
    return torch.ones(norm.normalized_shape) if w is None else host(w)


def norm_bias(norm: nn.Module) -> torch.Tensor | None:
    b = getattr(norm, "bias", None)
    return None if b is None else host(b)


def normalized(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x (..., C) through ``norm`` without its bias: each row centred (LayerNorm), divided by its own scale, times
    the gain."""
    return norm.normalize(host(x)) * gain(norm)


def center(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """x (..., C) minus its mean over C when ``norm`` is a LayerNorm (its centring is linear)."""
    return x - x.mean(dim=-1, keepdim=True) if centers(norm) else x


def final_norm(model) -> nn.Module:
    return model.ln_f


def unembed(model) -> tuple[torch.Tensor, torch.Tensor | None]:
    """W_U (V, C) and the output head's bias (V,) or None."""
    head = model.lm_head
    return host(head.weight), None if head.bias is None else host(head.bias)


def positions_table(model) -> torch.Tensor | None:
    """The position table (block_size, C) added to the token embeddings; None with rope (no table)."""
    table = getattr(model, "position_embedding", None)
    if table is None:
        return None
    return host(table(torch.arange(model.config.block_size, device=model.token_embeddings().device)))


def hook_name(model, point: nn.Module) -> str:
    """The public name of a hook point object (``blocks.0.attn.hook_z``)."""
    for name, candidate in model.hook_points().items():
        if candidate is point:
            return name
    raise TinyLMError("a hook point the circuits read has no name")


def pieces(tokenizer, ids) -> list[str]:
    return [tokenizer.decode_piece([i]) for i in ids]
