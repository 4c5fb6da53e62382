"""Lightning callbacks that show what the model learns while it trains, in TensorBoard.

- ``SampleText``: text generated from fixed prompts with a fixed seed (Text tab).
- ``AttentionMaps``: per-layer attention heatmaps of a fixed probe text, and the causal mask once
  (Images tab).
- ``NextTokenProbes``: the probability of an expected next character after a context, e.g.
  ``probe/Transforme→r``, to watch a rule being learned (Scalars tab).
- ``EmbeddingProjector``: the token embedding matrix with character labels (Projector tab).
- ``ShapeTrace``: prints every stage of one forward pass with its tensor shape (``debug=shapes``).

The periodic ones run every ``every_n_steps`` optimizer steps and once more when training ends.
They are observers: they run on rank 0 only, in eval mode without gradients, and a failure in
one of them is logged as a warning and skipped, so a plotting problem never stops a training run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch.nn import functional as F
from torch.utils.tensorboard import SummaryWriter

from tinylm import plotting
from tinylm.errors import TinyLMError
from tinylm.generation import check_sampling, encode_prompt, generate, inference_mode
from tinylm.model import trace_shapes
from tinylm.rnn import RNNLanguageModel
from tinylm.tokenizer import Tokenizer, tokenizer_from_state

log = logging.getLogger(__name__)


def tensorboard_writer(trainer: L.Trainer) -> SummaryWriter | None:
    """The SummaryWriter of the trainer's TensorBoard logger, if it has one."""
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            return logger.experiment
    return None


def guarded(what: str, step: int, action: Callable[[], None]) -> None:
    """Run ``action``; if it raises, log one warning and carry on (training must not stop)."""
    try:
        action()
    except Exception as e:  # any failure of an observer is survivable
        log.warning("%s failed at step %d and was skipped (%s: %s); training continues",
                    what, step, type(e).__name__, e)


def without_unknown(tokenizer: Tokenizer, text: str, what: str) -> str:
    """``text`` minus the characters the vocabulary lacks, with a warning naming them."""
    missing = tokenizer.unknown(text)
    if missing:
        log.warning("%s %r: skipping %d character(s) not in the vocabulary: %s",
                    what, text, len(missing), " ".join(repr(c) for c in missing))
    return "".join(ch for ch in text if ch not in missing)


def training_text_opening(trainer: L.Trainer, tokenizer: Tokenizer, max_chars: int) -> str:
    """The first ``max_chars`` characters of the first non-empty line of the training text."""
    ids = getattr(trainer.datamodule, "train_ids", None)
    if ids is None:
        raise TinyLMError("no training text to take a default from: set the text in the config")
    head = tokenizer.decode(ids[: 4 * max_chars + 256].tolist())  # 4: longest UTF-8 character
    lines = [line.strip() for line in head.splitlines() if line.strip()]
    return lines[0][:max_chars] if lines else ""


def _check_interval(owner: str, every_n_steps) -> int | None:
    if every_n_steps is None or (
        isinstance(every_n_steps, int) and not isinstance(every_n_steps, bool) and every_n_steps > 0
    ):
        return every_n_steps
    raise TinyLMError(
        f"{owner}.every_n_steps={every_n_steps!r} must be a positive integer, "
        "or null to run only when training ends"
    )


class PeriodicInspector(L.Callback):
    """Calls ``inspect`` every ``every_n_steps`` steps and at the end of training, on rank 0.

    Subclasses implement ``inspect(trainer, module)``. Time spent is added up in ``seconds`` and
    reported when training ends, so the cost of watching is visible next to the cost of training.
    """

    def __init__(self, every_n_steps: int | None):
        self.every_n_steps = _check_interval(type(self).__name__, every_n_steps)
        self.seconds = 0.0
        self.calls = 0
        self._last_step: int | None = None

    def inspect(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        raise NotImplementedError

    def timed(self, what: str, step: int, action: Callable[[], None]) -> None:
        """``guarded(action)``, its time added to ``seconds``."""
        started = time.perf_counter()
        guarded(what, step, action)
        self.seconds += time.perf_counter() - started
        self.calls += 1

    def run(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """Inspect now (once per step at most), never raising."""
        step = trainer.global_step
        if not trainer.is_global_zero or step == self._last_step:
            return
        self._last_step = step
        self.timed(type(self).__name__, step, lambda: self.inspect(trainer, module))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0:
            self.run(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self.run(trainer, pl_module)
        if self.calls:
            log.info("%s: %d call(s), %.2f s in total", type(self).__name__, self.calls,
                     self.seconds)


class SampleText(PeriodicInspector):
    """Continue fixed prompts with ``tinylm.generation.generate`` and log the text.

    ``prompts``: list of strings; null takes the first ``prompt_chars`` characters of the
    training text's first line. Characters outside the vocabulary are skipped with a warning.
    The generator is re-seeded with ``seed`` for every prompt, so at two different steps the
    samples differ only because the model did.
    """

    def __init__(
        self,
        every_n_steps: int | None = 500,
        prompts: Sequence[str] | None = None,
        prompt_chars: int = 4,
        max_new_tokens: int = 64,
        temperature: float = 0.8,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int = 1234,
    ):
        super().__init__(every_n_steps)
        check_sampling(temperature, top_k, top_p, max_new_tokens)
        if prompts is not None and (
            isinstance(prompts, str) or not all(isinstance(p, str) for p in prompts)
        ):
            raise TinyLMError(f"SampleText.prompts={prompts!r} must be a list of strings or null")
        if isinstance(prompt_chars, bool) or not isinstance(prompt_chars, int) or prompt_chars < 1:
            raise TinyLMError(f"SampleText.prompt_chars={prompt_chars!r} must be an integer >= 1")
        self.prompts = None if prompts is None else list(prompts)
        self.prompt_chars = prompt_chars
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
        self._prompt_ids: list[list[int]] | None = None

    def samples(self, model, tokenizer: Tokenizer, prompt_ids: list[list[int]]):
        """(prompt, continuation) text pairs, one per prompt, reproducible for given weights."""
        device = next(model.parameters()).device
        pairs = []
        for ids in prompt_ids:
            generator = torch.Generator(device).manual_seed(self.seed)
            idx = torch.tensor([ids], dtype=torch.long, device=device)  # (1, T)
            out = generate(model, idx, self.max_new_tokens, generator=generator, **self.sampling)
            pairs.append((tokenizer.decode(ids), tokenizer.decode(out[0, len(ids):].tolist())))
        return pairs

    def inspect(self, trainer, module) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None:
            return
        tokenizer = tokenizer_from_state(module.tokenizer_state)
        if self._prompt_ids is None:
            prompts = self.prompts or [
                training_text_opening(trainer, tokenizer, self.prompt_chars)
            ]
            self._prompt_ids = [
                encode_prompt(tokenizer, without_unknown(tokenizer, p, "sample prompt"), "skip")
                for p in prompts
            ]
        pairs = self.samples(module.model, tokenizer, self._prompt_ids)
        writer.add_text("samples", samples_markdown(pairs, trainer.global_step, self.seed,
                                                    self.sampling), trainer.global_step)


def _code_block(text: str) -> str:
    """Markdown code block by indentation: shows any text verbatim, newlines included."""
    return "\n".join("    " + line for line in text.split("\n"))


def samples_markdown(pairs, step: int, seed: int, sampling: dict) -> str:
    """TensorBoard Text-tab Markdown: for each sample, the prompt, then the continuation."""
    settings = ", ".join(f"{k}={v}" for k, v in sampling.items() if v is not None)
    parts = [f"Step {step}, {settings}, seed {seed}."]
    for i, (prompt, continuation) in enumerate(pairs, 1):
        parts += [f"**Prompt {i}:**", _code_block(prompt),
                  f"**Continuation {i}** (generated):", _code_block(continuation)]
    return "\n\n".join(parts)


class AttentionMaps(PeriodicInspector):
    """Attention heatmaps of a fixed probe text, one image per layer (panels = heads).

    ``text``: the probe; characters outside the vocabulary are skipped with a warning. A probe with
    fewer than 2 usable characters (blank, or unknown) is replaced by the first 16 characters of the
    training text's first line, and without such a line the maps are off for the run: decided once,
    when training starts, in one warning saying what to set. The causal mask for the probe's length
    is logged once, as ``attention/causal_mask``, when training starts. A model without attention
    (the LSTM/GRU baseline) is skipped with one warning.
    """

    def __init__(self, every_n_steps: int | None = 500, text: str = "自注意力可以让序列"):
        super().__init__(every_n_steps)
        if not isinstance(text, str):
            raise TinyLMError(f"AttentionMaps.text={text!r} must be a string")
        self.text = text
        self._ids: list[int] | None = None  # [] once decided that there is no probe this run
        self._labels: list[str] = []
        self._warned_no_attention = False

    def has_attention(self, module) -> bool:
        """False for an LSTM/GRU, saying so once: the same callback list serves every architecture."""
        if not isinstance(module.model, RNNLanguageModel):
            return True
        if not self._warned_no_attention:
            log.warning("AttentionMaps: the %s model has no attention to draw; skipped for this run",
                        module.model.config.arch)
            self._warned_no_attention = True
        return False

    def probe_ids(self, trainer, tokenizer: Tokenizer, block_size: int) -> list[int]:
        """The probe's token ids (at most block_size), or [] when there is none (said once)."""
        usable = "".join(ch for ch in self.text if ch not in tokenizer.unknown(self.text))
        if len(usable.strip()) >= 2:
            text = without_unknown(tokenizer, self.text, "attention probe text")  # names the skipped ones
        else:
            try:
                text = training_text_opening(trainer, tokenizer, 16)
            except TinyLMError:
                text = ""
            problem = f"AttentionMaps: the probe text {self.text!r} has fewer than 2 non-blank known characters"
            if len(text) < 2:
                log.warning("%s and there is no training text to take one from: no attention maps this run; "
                            "set callbacks.attention_maps.text to a phrase of the training text", problem)
                return []
            log.warning("%s: drawing the training text's opening %r instead; set "
                        "callbacks.attention_maps.text to a phrase of the training text", problem, text)
        ids = tokenizer.encode(text)
        if len(ids) > block_size:
            log.warning("attention probe text: keeping the first %d tokens (block_size)",
                        block_size)
        return ids[:block_size]

    def _prepare(self, trainer, module) -> None:
        """Decide the probe once per run: its ids and labels, or [] (no maps) also when this fails."""
        if self._ids is None:
            self._ids = []
            tokenizer = tokenizer_from_state(module.tokenizer_state)
            self._ids = self.probe_ids(trainer, tokenizer, module.model.config.block_size)
            self._labels = plotting.token_labels(tokenizer, self._ids)

    def log_causal_mask(self, trainer, module) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None:
            return
        self._prepare(trainer, module)
        if not self._ids:
            return
        T = len(self._ids)
        mask = module.model.blocks[0].attn.causal_mask[:T, :T]  # (T, T) True = visible
        image = plotting.render_rgb(plotting.causal_mask_figure(mask, self._labels))
        writer.add_image("attention/causal_mask", image, trainer.global_step, dataformats="HWC")

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.is_global_zero and self.has_attention(pl_module):
            self.timed("AttentionMaps (causal mask)", trainer.global_step,
                       lambda: self.log_causal_mask(trainer, pl_module))

    def inspect(self, trainer, module) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None or not self.has_attention(module):
            return
        self._prepare(trainer, module)
        if not self._ids:
            return
        step = trainer.global_step
        ids = torch.tensor(self._ids, device=module.device)  # (T,)
        for layer, weights in enumerate(plotting.attention_weights(module.model, ids)):
            figure = plotting.attention_figure(weights, self._labels, layer, note=f"step {step}")
            writer.add_image(f"attention/layer{layer}", plotting.render_rgb(figure), step,
                             dataformats="HWC")


class NextTokenProbes(PeriodicInspector):
    """Log P(expected | context) for fixed (context, expected) pairs as ``probe/<ctx>→<exp>``.

    The probability of a multi-token ``expected`` (e.g. a Chinese character under the byte
    tokenizer) is the product of its tokens' probabilities, read from one teacher-forced pass.
    Pairs with characters outside the vocabulary are skipped with a warning.
    """

    def __init__(self, every_n_steps: int | None = 50,
                 probes: Sequence[Sequence[str]] = (("Transforme", "r"), ("注意", "力"))):
        super().__init__(every_n_steps)
        for pair in probes:
            if (isinstance(pair, str) or len(pair) != 2
                    or not all(isinstance(s, str) and s for s in pair)):
                raise TinyLMError(
                    f"NextTokenProbes.probes: {pair!r} must be a [context, expected] pair of "
                    "non-empty strings, e.g. [Transforme, r]"
                )
        self.probes = [tuple(pair) for pair in probes]
        self._encoded: dict[str, tuple[list[int], int]] | None = None

    def encode(self, tokenizer: Tokenizer, block_size: int) -> dict[str, tuple[list[int], int]]:
        """Scalar name -> (context + expected ids, number of context ids), dropping bad pairs."""
        encoded = {}
        for context, expected in self.probes:
            missing = tokenizer.unknown(context + expected)
            if missing:
                log.warning("next-token probe %r -> %r skipped: %s not in the vocabulary",
                            context, expected, " ".join(repr(c) for c in missing))
                continue
            target = tokenizer.encode(expected)
            if len(target) >= block_size:
                log.warning("next-token probe %r -> %r skipped: expected text is longer than "
                            "block_size", context, expected)
                continue
            ctx = tokenizer.encode(context)[-(block_size - len(target)):]  # crop oldest first
            name = "".join(plotting.visible(c) for c in context) + "→" + "".join(
                plotting.visible(c) for c in expected)
            encoded[f"probe/{name}"] = (ctx + target, len(ctx))
        return encoded

    def probabilities(self, model, encoded) -> dict[str, float]:
        device = next(model.parameters()).device
        result = {}
        with inference_mode(model):
            for name, (ids, n_ctx) in encoded.items():
                idx = torch.tensor([ids], device=device)  # (1, L)
                logits, _ = model(idx)  # (1, L, V)
                log_probs = F.log_softmax(logits[0, n_ctx - 1 : -1].float(), dim=-1)  # (n_exp, V)
                targets = idx[0, n_ctx:]  # (n_exp,)
                result[name] = log_probs.gather(1, targets[:, None]).sum().exp().item()
        return result

    def inspect(self, trainer, module) -> None:
        if not trainer.loggers:
            return
        if self._encoded is None:
            tokenizer = tokenizer_from_state(module.tokenizer_state)
            self._encoded = self.encode(tokenizer, module.model.config.block_size)
        metrics = self.probabilities(module.model, self._encoded)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)


class EmbeddingProjector(PeriodicInspector):
    """The token embedding matrix (V, C) with one visible label per token, for the Projector tab.

    By default only when training ends (``every_n_steps: null``): each call writes a full copy.
    """

    def __init__(self, every_n_steps: int | None = None):
        super().__init__(every_n_steps)

    def inspect(self, trainer, module) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None:
            return
        tokenizer = tokenizer_from_state(module.tokenizer_state)
        weight = module.model.token_embedding.weight.detach().float().cpu()  # (V, C)
        labels = plotting.token_labels(tokenizer, range(weight.size(0)))
        writer.add_embedding(weight, metadata=labels, global_step=trainer.global_step,
                             tag="token_embedding")


# --------------------------------------------------------------------------------------------
# Shape trace

# stage -> (dimensions, what the tensor is). Stages inside a block repeat once per layer.
STAGES = {
    "ids": ("B, T", "token ids of the batch"),
    "token embedding": ("B, T, C", "one learned vector per token id"),
    "position embedding": ("T, C", "one vector per position, shared by the batch"),
    "token + position": ("B, T, C", "their sum (positions broadcast over B): block input"),
    "q": ("B, h, T, hs", "queries, split into h heads of size hs"),
    "k": ("B, h, T, hs", "keys"),
    "v": ("B, h, T, hs", "values"),
    "scores": ("B, h, T, T", "q·kᵀ/√hs: one row per query, one column per key"),
    "attention weights": ("B, h, T, T", "softmax over keys of the masked scores: rows sum to 1"),
    "attention output per head": ("B, h, T, hs", "softmax(masked scores) @ v"),
    "heads concatenated": ("B, T, C", "the heads side by side again (h·hs = C)"),
    "attention projection": ("B, T, C", "output projection of the attention (added to the residual)"),
    "feed-forward hidden": ("B, T, 4C", "the MLP's wider hidden layer, after ReLU"),
    "block output": ("B, T, C", "after both residual additions"),
    "final LayerNorm": ("B, T, C", "the last block's output, normalised"),
    "logits": ("B, T, V", "a score for every vocabulary symbol at every position"),
    "loss input: logits": ("B·T, V", "flattened for cross-entropy"),
    "loss input: targets": ("B·T", "the true next token of every position, flattened"),
}
IN_BLOCK = ("q", "k", "v", "scores", "attention weights", "attention output per head", "heads concatenated",
            "attention projection", "feed-forward hidden", "block output")


def shape_table(rows: list[tuple[str, tuple[int, ...]]], sizes: dict[str, int]) -> str:
    """Format ``trace_shapes`` rows as a table, naming blocks and each dimension's meaning."""
    table, layer = [], 0
    for stage, shape in rows:
        dims, meaning = STAGES.get(stage, ("?", ""))
        name = f"block {layer} · {stage}" if stage in IN_BLOCK else stage
        table.append((name, str(shape), f"({dims})", meaning))
        layer += stage == "block output"
    header = ("stage", "shape", "dimensions", "meaning")
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True))
             + "  " + row[3] for row in [header, *table]]
    lines.insert(1, "-" * max(len(line) for line in lines))
    legend = ", ".join(f"{k} = {v}" for k, v in sizes.items())
    return "\n".join([*lines, "", legend])


class ShapeTrace(L.Callback):
    """Print the shape of every stage of the forward pass for the first training batch.

    The batch goes through the explicit attention path (``return_attention=True``), so the
    (B, h, T, T) scores appear even when the model trains with SDPA.
    """

    def __init__(self):
        self.done = False

    def print_trace(self, module, batch) -> None:
        x, y = batch  # (B, T) each
        model = module.model
        with trace_shapes() as rows, inference_mode(model):
            model(x, y, return_attention=True)
        c = model.config
        sizes = {
            "B (sequences per batch)": x.size(0), "T (positions)": x.size(1),
            "C (embedding width)": c.n_embd, "h (heads)": c.num_heads,
            "hs (head size)": c.head_size, "V (vocabulary)": c.vocab_size,
        }
        print(f"\nforward pass of one batch, {c.num_layers} block(s):\n")
        print(shape_table(rows, sizes), flush=True)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.done or not trainer.is_global_zero:
            return
        self.done = True
        guarded("ShapeTrace", trainer.global_step, lambda: self.print_trace(pl_module, batch))
