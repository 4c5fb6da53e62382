"""What each comparison trains: its variants, as train.py overrides, and the metric that decides."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Comparison:
    title: str
    metric: str  # the metric that decides (loss, bpc or exact_match: the run's metrics' val_<metric>)
    variants: dict[str, list[str]]  # variant name -> its train.py overrides
    note: str
    seeds: int = 1  # > 1: every variant trained with seeds 1 .. seeds (<variant>/seed<k>/), reported as mean ± sd
    combine: bool = False  # add "combined": the overrides of every variant that beat the first, together


# the speedrun options (tests/test_model_tricks.py): each alone against the reference settings
TRICKS = {
    "rmsnorm": ["model.norm=rmsnorm"], "relu2": ["model.activation=relu2"], "qk_norm": ["model.qk_norm=true"],
    "softcap": ["model.logit_softcap=15"], "tied_head": ["model.tied_head=true"], "muon": ["optim=muon"],
}


def comparisons(steps: int, bpe_vocab_size: int, seeds: int = 3) -> dict[str, Comparison]:
    """Every comparison and its variants, for a budget of ``steps`` training steps (``seeds`` per variant
    where a comparison reports a mean)."""
    warmup = max(1, steps // 10)
    schedule = [f"optim.warmup_steps={warmup}", f"optim.decay_steps={steps}"]
    clip = ["trainer.gradient_clip_val=1.0"]
    # the numbers_zh demo's training settings, for both architectures
    pairs = ["data=pairs", "model.dropout=0.0", "optim.lr=2.0e-3", f"optim.warmup_steps={warmup}",
             f"optim.decay_steps={steps}"]
    return {
        "positions": Comparison(
            "Position encodings", "loss",
            {p: [f"model.pos_encoding={p}"] for p in ("learned", "sinusoidal", "rope")},
            "learned: a trained (block_size, C) table; sinusoidal: fixed sin/cos added to the embeddings; "
            "rope: queries and keys rotated by their position inside attention. Only learned has position "
            "parameters.",
        ),
        "tokenizers": Comparison(
            "Tokenizers", "bpc",
            {"char": ["data.tokenizer=char"], "byte": ["data.tokenizer=byte"],
             "bpe": ["data.tokenizer=bpe", f"data.bpe_vocab_size={bpe_vocab_size}"]},
            "Per-token losses of different vocabularies are not comparable: compare val_bpc, the bits per "
            "character of the same validation text (validation bits / validation characters). Every run "
            "sees the same number of tokens per step; a BPE or char token covers more text than a byte.",
        ),
        "rnn": Comparison(
            "Transformer vs recurrent baseline", "loss",
            {"gpt": ["model=gpt"], "lstm": ["model=lstm"], "gru": ["model=lstm", "model.arch=gru"]},
            "Same LightningModule, data and callbacks; tokens_per_second is training throughput on this "
            "machine (validation and checkpoints included in the wall time).",
        ),
        "schedules": Comparison(
            "Learning-rate schedules and clipping", "loss",
            {"constant_lr": [], "warmup_cosine": schedule, "grad_clip": clip, "warmup_cosine_clip": schedule + clip},
            f"constant_lr is the reference schedule; warmup_cosine: linear warmup for {warmup} steps, then cosine "
            f"decay to 0.1 x lr at step {steps}; grad_clip: gradient norm clipped at 1.0.",
        ),
        "tricks": Comparison(
            "Speedrun tricks at this scale", "loss",
            {"baseline": [], **TRICKS, "warmup_cosine": schedule, "warmup_linear": [*schedule, "optim.decay=linear"],
             "grad_clip": clip},
            "Each trick alone against the reference settings (baseline), then `combined`: every trick whose mean "
            "beat the baseline's at equal steps (of the two schedules, the better). softcap: 15; muon: Muon (lr "
            f"0.02, float32 Newton-Schulz) for the block matrices, AdamW for the rest; schedules: {warmup} warmup "
            f"steps, decay to 0.1 x lr at step {steps}.",
            seeds=seeds, combine=True,
        ),
        "seq2seq": Comparison(
            "Translation: encoder-decoder vs decoder-only", "exact_match",
            {"seq2seq": ["model=seq2seq", *pairs, "model.block_size=8"],
             "gpt": ["model=gpt", *pairs, "model.block_size=12", "model.num_layers=5"]},
            "The generated numbers_zh pairs (Chinese numerals to digits; validation numbers never trained on), "
            "the same steps, batch of pairs, learning rate and schedule. seq2seq: 2 encoder + 2 decoder layers "
            "with cross-attention; gpt: 5 causal layers of the same width (a similar parameter count) reading "
            "source + BEGIN + target as one sequence, with the loss on the target only. exact_match and cer: "
            "greedy translations of the held-out pairs.",
        ),
    }
