"""A decoder-only (GPT-style) character Transformer, as a plain ``nn.Module``.

Read it top to bottom: configuration, attention, feed-forward, block, model (the position
encodings are in ``tinylm.models.positions``, shared with the encoder-decoder).
Shapes use B = batch, T = sequence length, C = n_embd, h = num_heads, hs = head size = C / h,
V = vocabulary size.

    ids (B, T) -> token embedding (B, T, C) + position embedding (T, C)
      -> num_layers x [ x + attn(ln1(x)),  x + ffwd(ln2(x)) ]
      -> final LayerNorm -> lm_head -> logits (B, T, V)

With rotary positions (``pos_encoding="rope"``) nothing is added to the token embedding: inside
every attention layer the queries and keys are rotated by their position instead.

Options from the speedrun projects (modded-nanogpt, nanochat), each off by default: ``norm="rmsnorm"``
(RMSNorm with a gain in place of every LayerNorm), ``activation="relu2"`` (relu(x)² in the
feed-forward), ``qk_norm`` (queries and keys scaled to unit RMS per head before their dot product),
``logit_softcap`` (logits squashed into (-cap, cap) by cap·tanh(logits/cap)) and ``tied_head``
(lm_head reuses the token embedding matrix; its bias stays).

Every stage passes its tensor through a named hook point (``tinylm.models.hook_points``), where a
user reads or replaces it: ``hook_embed``, ``blocks.0.attn.hook_pattern``, ... (TransformerLens's
names and shapes; the comment beside each says its shape).

The module knows nothing about Lightning; ``tinylm.training.module`` wraps it for training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from tinylm.models.base import Decoder, ModelConfig
from tinylm.models.gpt_checks import gpt_config_problems
from tinylm.models.hook_points import HookPoint
from tinylm.models.kvcache import KVCache, KVCaches
from tinylm.models.norms import NORMS
from tinylm.models.ops import Dropout
from tinylm.models.positions import RotaryPositions, position_embedding


@dataclass
class GPTConfig(ModelConfig):
    arch: str = "gpt"
    block_size: int = 32
    n_embd: int = 64
    num_heads: int = 4
    num_layers: int = 4
    dropout: float = 0.1
    pos_encoding: str = "learned"  # "learned" table, fixed "sinusoidal" or "rope" (no parameters)
    attn_impl: str = "sdpa"  # "sdpa" (fused, fast) or "explicit" (readable, the weights written out)
    norm: str = "layernorm"  # "layernorm" or "rmsnorm" (a gain, no bias)
    activation: str = "relu"  # the feed-forward's: "relu" or "relu2" (relu(x)**2)
    qk_norm: bool = False  # queries and keys at unit RMS per head
    logit_softcap: float | None = None  # None: raw logits; cap: cap * tanh(logits / cap)
    tied_head: bool = False  # lm_head.weight is token_embedding.weight
    # the same weights train with either attention; the options without weights of their own load either way
    free_keys = ("dropout", "attn_impl", "activation", "qk_norm", "logit_softcap")
    # recorded in a checkpoint only when not at their default: a reference model's config holds none of them
    option_keys = ("norm", "activation", "qk_norm", "logit_softcap", "tied_head")

    @property
    def head_size(self) -> int:
        return self.n_embd // self.num_heads

    @classmethod
    def problems(cls, cfg: dict) -> list[str]:
        return gpt_config_problems(cfg)


# --------------------------------------------------------------------------------------------
# Attention (each causal one owns its KV cache, the keys and values of past positions: tinylm.models.kvcache)


class Attention(nn.Module):
    """Multi-head attention's parts, shared by every attention here (the encoder-decoder's too):
    q, k, v from one fused projection (no bias), rope on request, the weights written out
    (``explicit``), the heads' outputs projected back (``output``). A hook on ``hook_attn_scores`` or
    ``hook_pattern`` makes a fast path (SDPA) write the weights out too, so they exist to be seen."""

    def __init__(self, n_embd: int, num_heads: int, dropout: float, block_size: int, rope: bool,
                 qk_norm: bool = False):
        super().__init__()
        self.num_heads = num_heads
        self.qk_norm = qk_norm
        self.head_size = n_embd // num_heads
        self.dropout = dropout
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = Dropout(dropout)
        self.resid_dropout = Dropout(dropout)
        self.rotary = RotaryPositions(block_size, self.head_size) if rope else None
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()  # (B, T, h, hs) each
        if rope:
            self.hook_rot_q, self.hook_rot_k = HookPoint(), HookPoint()  # (B, T, h, hs): rotated
        self.hook_attn_scores = HookPoint()  # (B, h, T, T'): q·kᵀ/√hs, -inf where hidden
        self.hook_pattern = HookPoint()  # (B, h, T, T'): softmax of the scores, rows sum to 1
        self.hook_z = HookPoint()  # (B, T, h, hs): each head's output, pattern @ v

    @property
    def shows_weights(self) -> bool:
        """Whether a hook waits for the scores or the weights: then even a fast path writes them out."""
        return self.hook_attn_scores.active or self.hook_pattern.active

    def heads(self, t: torch.Tensor) -> torch.Tensor:
        """(B, T, C) -> (B, T, h, hs): the heads' slices of every position."""
        B, T, _ = t.shape
        return t.view(B, T, self.num_heads, self.head_size)

    def query_key_value(self, x: torch.Tensor, start: int = 0):
        """x (B, T, C) at positions start .. start+T-1 -> q, k, v (B, h, T, hs), rope applied."""
        C = x.size(2)
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        q, k, v = self.hook_q(self.heads(q)), self.hook_k(self.heads(k)), self.hook_v(self.heads(v))  # (B, T, h, hs)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # 3 x (B, h, T, hs)
        if self.qk_norm:  # each head's query and key at unit RMS: the scores' scale does not grow with training
            q, k = F.rms_norm(q, (self.head_size,)), F.rms_norm(k, (self.head_size,))
        if self.rotary is not None:  # keys are stored in the cache already rotated
            q = self.hook_rot_q(self.rotary(q, start).transpose(1, 2)).transpose(1, 2)  # (B, h, T, hs)
            k = self.hook_rot_k(self.rotary(k, start).transpose(1, 2)).transpose(1, 2)  # (B, h, T, hs)
        return q, k, v

    def explicit(self, q, k, v, bias, fused: torch.Tensor | None = None):
        """Attention written out, one fused op over the B*h heads: softmax(q kᵀ/√hs + bias) @ v (B, h, T, hs),
        for q (B, h, T, hs), k and v (B, h, T', hs) and a bias (0: visible, -inf: hidden) broadcastable
        to (B*h, T, T'). The encoder-decoder's attentions use it too. ``fused``: the same output from a fast
        kernel, returned as it is unless a hook changed the scores or the weights (so a hook that only
        looks changes no bit)."""
        B, h, T, _ = q.shape
        qs, ks = q.flatten(0, 1), k.flatten(0, 1)  # (B*h, T, hs), (B*h, T', hs)
        scores = torch.baddbmm(bias, qs, ks.transpose(1, 2), alpha=1.0 / math.sqrt(self.head_size))
        scores, changed = self.hook_attn_scores.passed(scores.view(B, h, T, -1))  # (B, h, T, T')
        weights, changed_weights = self.hook_pattern.passed(F.softmax(scores, dim=-1))  # (B, h, T, T'), rows sum to 1
        if fused is not None and not (changed or changed_weights):
            return fused
        return self.attn_dropout(weights) @ v  # (B, h, T, hs)

    def output(self, y):
        """The heads' outputs (B, h, T, hs) side by side again, projected: (B, T, C)."""
        B, _, T, _ = y.shape
        z = self.hook_z(y.transpose(1, 2))  # (B, T, h, hs)
        y = z.contiguous().view(B, T, -1)  # (B, T, C): heads concatenated
        return self.resid_dropout(self.proj(y))  # (B, T, C)


class CausalSelfAttention(Attention):
    """Multi-head masked self-attention: each position sees itself and the positions before it.

    ``impl``: "sdpa" (PyTorch's fused kernel, fast) or "explicit" (the weights written out).
    """

    def __init__(self, n_embd: int, num_heads: int, dropout: float, block_size: int, rope: bool, impl: str,
                 qk_norm: bool = False):
        super().__init__(n_embd, num_heads, dropout, block_size, rope, qk_norm)
        self.impl = impl
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("causal_mask", mask, persistent=False)  # (block, block), True = visible
        # the same mask as a bias added to the scores: 0 where visible, -inf where not
        bias = torch.zeros(block_size, block_size).masked_fill(~mask, float("-inf"))
        self.register_buffer("causal_bias", bias, persistent=False)  # (block, block)
        self.kv_cache: KVCache | None = None  # the past positions' keys/values while decoding (KVCaches)

    def forward(self, x, use_cache: bool = False, explicit: bool = False):
        """x (B, T, C) -> (B, T, C). ``explicit``: the written-out attention whatever ``impl`` says."""
        T = x.size(1)
        cache = self.kv_cache if use_cache else None
        start = cache.length if cache is not None else 0
        q, k, v = self.query_key_value(x, start)

        if cache is not None:  # append this step's keys/values, attend over everything stored
            k, v = cache.append(k, v)  # (B, h, start+T, hs) each
        # query i (absolute position start+i) may see keys 0 .. start+i
        mask = self.causal_mask[start : start + T, : start + T]  # (T, start+T)

        # On CPU, SDPA with dropout falls back to an unfused kernel with slow masks: during training
        # with dropout the explicit path (with the cheap Dropout) is faster there. Same numbers.
        dropout_on_cpu = self.training and self.dropout > 0 and x.device.type == "cpu"
        bias = self.causal_bias[start : start + T, : start + T]  # (T, T'), -inf above the diagonal
        if self.impl == "explicit" or explicit or dropout_on_cpu:
            y = self.explicit(q, k, v, bias)  # (B, h, T, hs)
        else:
            dropout_p = self.dropout if self.training else 0.0
            if start == 0:  # prefill / training: plain causal attention
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
            else:  # cached decoding; one new query sees every stored key, so it needs no mask
                attn_mask = None if T == 1 else mask
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
            if self.shows_weights:  # the weights written out for the hooks; SDPA's y stays unless one changes them
                y = self.explicit(q, k, v, bias, fused=y)  # (B, h, T, hs)
        return self.output(y)


# --------------------------------------------------------------------------------------------
# Feed-forward and block


class FeedForward(nn.Module):
    """Linear(C, 4C) -> ReLU (squared: ``squared``) -> Linear(4C, C) -> Dropout, applied to each position alone."""

    def __init__(self, n_embd: int, dropout: float, squared: bool = False):
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = Dropout(dropout)
        self.squared = squared
        self.hook_pre = HookPoint()  # (B, T, 4C): before the activation
        self.hook_post = HookPoint()  # (B, T, 4C): after it

    def forward(self, x):
        h = F.relu(self.hook_pre(self.fc(x)))  # (B, T, 4C)
        if self.squared:
            h = h.square()  # relu(x)**2
        return self.dropout(self.proj(self.hook_post(h)))  # (B, T, C)


class Block(nn.Module):
    """Pre-LayerNorm Transformer block: x + attn(ln1(x)), then x + ffwd(ln2(x)) (RMSNorms with norm="rmsnorm")."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        c = config
        self.ln1 = NORMS[c.norm](c.n_embd)
        self.attn = CausalSelfAttention(c.n_embd, c.num_heads, c.dropout, c.block_size,
                                        rope=c.pos_encoding == "rope", impl=c.attn_impl, qk_norm=c.qk_norm)
        self.ln2 = NORMS[c.norm](c.n_embd)
        self.ffwd = FeedForward(c.n_embd, c.dropout, squared=c.activation == "relu2")
        # the residual stream (B, T, C) at each stage, and what each half adds to it
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()
        self.hook_attn_out, self.hook_mlp_out = HookPoint(), HookPoint()

    def forward(self, x, use_cache: bool = False, explicit: bool = False):
        x = self.hook_resid_pre(x)  # (B, T, C)
        x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(self.ln1(x), use_cache, explicit)))  # (B, T, C)
        x = self.hook_resid_post(x + self.hook_mlp_out(self.ffwd(self.ln2(x))))  # (B, T, C)
        return x


# --------------------------------------------------------------------------------------------
# The model


class GPT(Decoder):
    has_attention = True
    hook_aliases = {"ffwd": "mlp", "ln_f": "ln_final"}  # hook point names in TransformerLens's words

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.n_embd)
        # a table added to the token embeddings; None with rope (positions enter inside attention)
        self.position_embedding = position_embedding(config.pos_encoding, config.block_size, config.n_embd)
        self.drop = Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.ln_f = NORMS[config.norm](config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size)  # untied from token_embedding ...
        if config.tied_head:  # ... unless tied: one (V, C) matrix embeds the tokens and scores them
            self.lm_head.weight = self.token_embedding.weight
        self.hook_embed = HookPoint()  # (B, T, C)
        if self.position_embedding is not None:
            self.hook_pos_embed = HookPoint()  # (B, T, C): the same (T, C) rows for every sequence
        self.apply(self._init_weights)
        self.hook_points()  # named, and quick to reach (tinylm.models.hook_points.named_hook_points)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # Small normal weights and zero biases: the initial loss is close to ln(V).
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def blocks_output(self, idx, cache: KVCaches | None = None, explicit: bool = False):
        """idx (B, T) -> the last block's output (B, T, C): embeddings, then every block.
        ``explicit``: every attention written out (the same ops whatever the lengths)."""
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of {start + T} tokens is longer than block_size={self.config.block_size}")
        x = self.hook_embed(self.token_embedding(idx))  # (B, T, C)
        if self.position_embedding is not None:
            pos = self.position_embedding(torch.arange(start, start + T, device=idx.device))  # (T, C)
            x = x + self.hook_pos_embed(pos.expand(B, T, -1))  # (B, T, C), one table for every sequence
        x = self.drop(x)  # (B, T, C)
        for block in self.blocks:
            x = block(x, cache is not None, explicit)  # (B, T, C); each attention appends to its own cache
        return x

    def head(self, x):
        """A block's output (B, T, C) -> final LayerNorm -> lm_head -> logits (B, T, V), soft-capped if asked."""
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        cap = self.config.logit_softcap
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)  # (B, T, V), each in (-cap, cap)
        return logits

    def forward(self, idx, targets=None, cache: KVCaches | None = None, last_only=False):
        """idx (B, T) -> (logits (B, T, V), loss or None).

        ``cache``: decode incrementally; ``idx`` holds only the new positions.
        ``last_only``: logits of the last position only, (B, 1, V), and no loss: generation needs
        no others, so lm_head (T x C x V) runs once instead of T times.
        """
        B, T = idx.shape
        x = self.blocks_output(idx, cache)  # (B, T, C)
        if last_only:
            x = x[:, -1:]  # (B, 1, C)
        logits = self.head(x)  # (B, T, V)

        loss = None
        if targets is not None and not last_only:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))  # (B*T, V) vs (B*T,)
        return logits, loss

    def parameter_table(self) -> list[tuple[str, int]]:
        """(part, parameter count) rows: embeddings, each block, final LayerNorm, lm_head (a tied
        head's matrix is counted once, with the token embedding)."""
        parts = [("token_embedding", self.token_embedding), ("position_embedding", self.position_embedding)]
        parts += [(f"blocks.{i}", block) for i, block in enumerate(self.blocks)]
        parts += [("ln_f", self.ln_f), ("lm_head", self.lm_head)]
        return self.counted(parts)

    def new_cache(self, batch_size: int, device=None, dtype=torch.float32) -> KVCaches:
        return KVCaches.empty([block.attn for block in self.blocks], batch_size, device, dtype)

    def step(self, idx, past_keys, past_values):
        cache = KVCaches([block.attn for block in self.blocks], past_keys, past_values)
        # explicit: the written-out attention, the same ops for any P and T (SDPA branches on them)
        x = self.blocks_output(idx, cache, explicit=True)  # (B, T, C)
        logits = self.head(x)  # (B, T, V)
        return (logits, *cache.release())  # keys and values (L, B, h, P+T, hs) each

    def past_shape(self, batch_size: int, length: int) -> tuple[int, ...]:
        c = self.config
        return (c.num_layers, batch_size, c.num_heads, length, c.head_size)  # (L, B, h, P, hs)

    def attention_layers(self) -> dict[str, list[nn.Module]]:
        return {"self": [block.attn for block in self.blocks]}

    def residual_layers(self) -> list[nn.Module]:
        return list(self.blocks)

    def dimensions(self) -> dict[str, int]:
        c = self.config
        return {"C (embedding width)": c.n_embd, "h (heads)": c.num_heads, "hs (head size)": c.head_size,
                "V (vocabulary)": c.vocab_size}
