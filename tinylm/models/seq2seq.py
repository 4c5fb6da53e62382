"""An encoder-decoder Transformer (Vaswani et al. 2017) for translation, built from the GPT's blocks.

Read it top to bottom: configuration, the three kinds of attention, the two kinds of block, the
model. Shapes use B = batch, S = source length, T = target length, C = n_embd, h = num_heads,
hs = head size = C / h, V = vocabulary size (one vocabulary for both sides).

    source ids (B, S) -> token + position embedding (B, S, C)
      -> encoder_layers x [ x + self_attn(ln1(x)),  x + ffwd(ln2(x)) ]      every source position
      -> LayerNorm -> memory (B, S, C)                                        sees every other one
    target ids (B, T), BEGIN first -> token + position embedding (B, T, C)
      -> decoder_layers x [ x + causal_self_attn(ln1(x)),                     the GPT's attention
                            x + cross_attn(ln2(x), memory),                   target looks at source
                            x + ffwd(ln3(x)) ]
      -> final LayerNorm -> lm_head -> logits (B, T, V): the next target symbol at every position

Sources are padded with PAD_ID at the end: the encoder's self-attention and the cross-attention
never look at a padding key, so a padded example gives the same outputs as the example alone.
Targets need no mask of their own: causal attention never sees the padding after a target's END.

Hook points as the GPT's (``tinylm.models.hook_points``), in the encoder's and the decoder's words:
``hook_src_embed``, ``hook_src_pos_embed``, ``encoder.{l}.hook_resid_pre``, ``encoder.{l}.attn.hook_pattern``,
..., ``ln_memory.hook_normalized``, ``hook_tgt_embed``, ``hook_tgt_pos_embed``, ``decoder.{l}.self_attn.hook_z``,
``decoder.{l}.cross_attn.hook_pattern`` (B, h, T, S), ``decoder.{l}.hook_cross_attn_out``, ...,
``ln_final.hook_normalized``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

from tinylm.models.base import EncoderDecoder, ModelConfig
from tinylm.models.gpt import GPT, Attention, CausalSelfAttention, FeedForward
from tinylm.models.hook_points import HookPoint
from tinylm.models.kvcache import KVCaches
from tinylm.models.norms import LayerNorm
from tinylm.models.ops import Dropout
from tinylm.models.positions import position_embedding
from tinylm.models.seq2seq_checks import seq2seq_config_problems

PAD_ID, BEGIN_ID, END_ID = 0, 1, 2  # the first three symbols of every translation vocabulary


@dataclass
class Seq2SeqConfig(ModelConfig):
    arch: str = "seq2seq"
    block_size: int = 16  # the longest source, and the longest target plus its END symbol
    n_embd: int = 64
    num_heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    dropout: float = 0.1
    pos_encoding: str = "learned"  # "learned" table, fixed "sinusoidal" or "rope", shared by both sides

    @property
    def head_size(self) -> int:
        return self.n_embd // self.num_heads

    @classmethod
    def problems(cls, cfg: dict) -> list[str]:
        return seq2seq_config_problems(cfg)


# --------------------------------------------------------------------------------------------
# Attention: the GPT's parts, without a causal mask (encoder) or with keys from the source (cross)


def padding_bias(src: torch.Tensor, num_heads: int) -> torch.Tensor:
    """src (B, S) -> (B*h, 1, S): 0 for a source symbol, -inf for padding, the same for every head and query."""
    bias = torch.zeros(src.shape, device=src.device).masked_fill(src == PAD_ID, float("-inf"))  # (B, S)
    return bias.repeat_interleave(num_heads, dim=0).unsqueeze(1)  # (B*h, 1, S)


class SelfAttention(Attention):
    """The GPT's attention with no causal mask: each source position sees the whole source but its padding."""

    def forward(self, x, pad_bias):
        q, k, v = self.query_key_value(x)  # (B, h, S, hs) each, rope applied
        y = self.explicit(q, k, v, pad_bias)  # (B, h, S, hs)
        return self.output(y)


class CrossAttention(Attention):
    """Target queries over the source: q from the decoder, k and v from the encoder's output.

    The same fused projection as the GPT's, its first C rows for queries and the other 2C for keys
    and values. No causal mask (the whole source is known) and no rope (target and source
    positions are not comparable); only the source's padding is hidden.
    """

    def memory_keys_values(self, memory):
        """memory (B, S, C) -> k, v (B, h, S, hs): computed once per source, used at every decoding step."""
        C = memory.size(2)
        k, v = F.linear(memory, self.qkv.weight[C:]).split(C, dim=2)  # 2 x (B, S, C)
        k, v = self.hook_k(self.heads(k)), self.hook_v(self.heads(v))  # (B, S, h, hs) each
        return k.transpose(1, 2), v.transpose(1, 2)  # (B, h, S, hs) each

    def forward(self, x, memory_kv, pad_bias):
        C = x.size(2)
        q = self.hook_q(self.heads(F.linear(x, self.qkv.weight[:C])))  # (B, T, h, hs)
        y = self.explicit(q.transpose(1, 2), *memory_kv, pad_bias)  # (B, h, T, hs)
        return self.output(y)


# --------------------------------------------------------------------------------------------
# Blocks, pre-LayerNorm like the GPT's


class EncoderBlock(nn.Module):
    """x + self_attn(ln1(x)), then x + ffwd(ln2(x))."""

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        c = config
        self.ln1 = LayerNorm(c.n_embd)
        self.attn = SelfAttention(c.n_embd, c.num_heads, c.dropout, c.block_size, rope=c.pos_encoding == "rope")
        self.ln2 = LayerNorm(c.n_embd)
        self.ffwd = FeedForward(c.n_embd, c.dropout)
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()
        self.hook_attn_out, self.hook_mlp_out = HookPoint(), HookPoint()  # (B, S, C) each

    def forward(self, x, pad_bias):
        x = self.hook_resid_pre(x)  # (B, S, C)
        x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(self.ln1(x), pad_bias)))  # (B, S, C)
        x = self.hook_resid_post(x + self.hook_mlp_out(self.ffwd(self.ln2(x))))  # (B, S, C)
        return x


@dataclass
class Memory:
    """An encoded source, all the decoder reads of it: computed once, however many steps decode."""

    keys_values: list[tuple[torch.Tensor, torch.Tensor]]  # per decoder layer, k and v (B, h, S, hs)
    pad_bias: torch.Tensor  # (B*h, 1, S): -inf on padding


class DecoderBlock(nn.Module):
    """x + causal_self_attn(ln1(x)), then x + cross_attn(ln2(x), source), then x + ffwd(ln3(x))."""

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        c = config
        self.ln1 = LayerNorm(c.n_embd)
        self.self_attn = CausalSelfAttention(c.n_embd, c.num_heads, c.dropout, c.block_size,
                                             rope=c.pos_encoding == "rope", impl="explicit")
        self.ln2 = LayerNorm(c.n_embd)
        self.cross_attn = CrossAttention(c.n_embd, c.num_heads, c.dropout, c.block_size, rope=False)
        self.ln3 = LayerNorm(c.n_embd)
        self.ffwd = FeedForward(c.n_embd, c.dropout)
        # the residual stream (B, T, C) at each stage, and what each of the three parts adds to it
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_mid_cross = HookPoint(), HookPoint(), HookPoint()
        self.hook_resid_post = HookPoint()
        self.hook_attn_out, self.hook_cross_attn_out, self.hook_mlp_out = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x, memory_kv, pad_bias, use_cache: bool = False):
        """x (B, T, C); memory_kv: this block's k, v of the source (B, h, S, hs); pad_bias (B*h, 1, S)."""
        x = self.hook_resid_pre(x)  # (B, T, C)
        x = self.hook_resid_mid(x + self.hook_attn_out(self.self_attn(self.ln1(x), use_cache)))  # (B, T, C)
        a = self.hook_cross_attn_out(self.cross_attn(self.ln2(x), memory_kv, pad_bias))  # (B, T, C)
        x = self.hook_resid_mid_cross(x + a)  # (B, T, C)
        x = self.hook_resid_post(x + self.hook_mlp_out(self.ffwd(self.ln3(x))))  # (B, T, C)
        return x


# --------------------------------------------------------------------------------------------
# The model


class Seq2Seq(EncoderDecoder):
    has_attention = True
    hook_aliases = {"ffwd": "mlp", "ln_f": "ln_final"}  # hook point names in TransformerLens's words

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.n_embd)  # both sides
        # a table added to the token embeddings; None with rope (positions enter inside self-attention)
        self.position_embedding = position_embedding(config.pos_encoding, config.block_size, config.n_embd)
        self.drop = Dropout(config.dropout)
        self.encoder = nn.ModuleList(EncoderBlock(config) for _ in range(config.encoder_layers))
        self.ln_memory = LayerNorm(config.n_embd)
        self.decoder = nn.ModuleList(DecoderBlock(config) for _ in range(config.decoder_layers))
        self.ln_f = LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size)
        self.hook_src_embed, self.hook_tgt_embed = HookPoint(), HookPoint()  # (B, S, C), (B, T, C)
        if self.position_embedding is not None:
            self.hook_src_pos_embed, self.hook_tgt_pos_embed = HookPoint(), HookPoint()  # (B, S, C), (B, T, C)
        self.apply(GPT._init_weights)
        self.hook_points()  # named, and quick to reach (tinylm.models.hook_points.named_hook_points)

    def embed(self, idx: torch.Tensor, side: str, start: int = 0) -> torch.Tensor:
        """ids (B, L) at positions start .. start+L-1 -> token + position embedding (B, L, C), each part
        through its side's hook point (``side``: "src" or "tgt")."""
        B, L = idx.shape
        if start + L > self.config.block_size:
            raise ValueError(f"sequence of {start + L} tokens is longer than block_size={self.config.block_size}")
        x = getattr(self, f"hook_{side}_embed")(self.token_embedding(idx))  # (B, L, C)
        if self.position_embedding is not None:
            pos = self.position_embedding(torch.arange(start, start + L, device=idx.device))  # (L, C)
            x = x + getattr(self, f"hook_{side}_pos_embed")(pos.expand(B, L, -1))  # (B, L, C)
        return self.drop(x)

    def encode(self, src: torch.Tensor) -> Memory:
        """Source ids (B, S), padded with PAD_ID at the end -> what the decoder reads of them."""
        pad_bias = padding_bias(src, self.config.num_heads)  # (B*h, 1, S)
        x = self.embed(src, "src")  # (B, S, C)
        for block in self.encoder:
            x = block(x, pad_bias)  # (B, S, C)
        memory = self.ln_memory(x)  # (B, S, C)
        keys_values = [block.cross_attn.memory_keys_values(memory) for block in self.decoder]
        return Memory(keys_values, pad_bias)

    def decode(self, tgt: torch.Tensor, memory: Memory, cache: KVCaches | None = None, last_only: bool = False):
        """Target ids (B, T) -> logits (B, T, V).

        ``cache``: decode incrementally, ``tgt`` holding only the new positions. ``last_only``: the
        logits of the last position only, (B, 1, V).
        """
        start = cache.length if cache is not None else 0
        x = self.embed(tgt, "tgt", start)  # (B, T, C)
        for block, memory_kv in zip(self.decoder, memory.keys_values, strict=True):
            x = block(x, memory_kv, memory.pad_bias, cache is not None)  # (B, T, C)
        if last_only:
            x = x[:, -1:]  # (B, 1, C)
        return self.head(x)  # (B, T, V)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """A decoder block's output (B, T, C) -> final LayerNorm -> lm_head -> logits (B, T, V)."""
        return self.lm_head(self.ln_f(x))

    def forward(self, src, tgt, targets=None):
        """Teacher forcing: src (B, S), tgt (B, T) = BEGIN + target -> (logits (B, T, V), loss or None).

        ``targets`` (B, T) = target + END, padded with PAD_ID, which the loss leaves out.
        """
        logits = self.decode(tgt, self.encode(src))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD_ID)  # (B*T, V), (B*T,)
        return logits, loss

    def new_cache(self, batch_size: int, device=None, dtype=torch.float32) -> KVCaches:
        """Each decoder self-attention's KV cache (the source's keys and values are in ``Memory``)."""
        return KVCaches.empty([block.self_attn for block in self.decoder], batch_size, device, dtype)

    def attention_layers(self) -> dict[str, list[nn.Module]]:
        return {"encoder": [block.attn for block in self.encoder],
                "decoder": [block.self_attn for block in self.decoder],
                "cross": [block.cross_attn for block in self.decoder]}

    def residual_layers(self) -> list[nn.Module]:
        return list(self.decoder)  # the logit lens reads the decoder

    def parameter_table(self) -> list[tuple[str, int]]:
        """(part, parameter count) rows: embeddings, encoder blocks, decoder blocks, LayerNorms, lm_head."""
        parts = [("token_embedding", self.token_embedding), ("position_embedding", self.position_embedding)]
        parts += [(f"encoder.{i}", block) for i, block in enumerate(self.encoder)]
        parts += [("ln_memory", self.ln_memory)]
        parts += [(f"decoder.{i}", block) for i, block in enumerate(self.decoder)]
        parts += [("ln_f", self.ln_f), ("lm_head", self.lm_head)]
        return self.counted(parts)

    def dimensions(self) -> dict[str, int]:
        c = self.config
        return {"C (embedding width)": c.n_embd, "h (heads)": c.num_heads, "hs (head size)": c.head_size,
                "V (vocabulary)": c.vocab_size}
