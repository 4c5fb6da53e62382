"""``AttentionMaps``: per-layer attention heatmaps of a fixed probe text, in the Images tab, and their raw
weights for the tinylm TensorBoard plugin (``tinylm.callbacks.attention``)."""

from __future__ import annotations

import torch

from tinylm.callbacks.attention import AttentionInspector, add_rgb_image, record_in_run_folder, weights_summary
from tinylm.callbacks.inspector import (
    log,
    tensorboard_writer,
    training_text_opening,
    validate_interval,
    without_unknown,
)
from tinylm.errors import TinyLMError
from tinylm.plots import figures as plotting
from tinylm.tasks.probe_text import OPENING_CHARS, known_probe
from tinylm.tokenizer import Tokenizer, tokenizer_from_state
from tinylm.values import check_value, integer


class AttentionMaps(AttentionInspector):
    """Attention heatmaps of a fixed probe text, one image per layer (panels = heads).

    ``text``: the probe; characters outside the vocabulary are skipped with a warning. A probe with
    fewer than 2 usable characters (blank, or unknown) is replaced by the first 16 characters of the
    training text's first line, and without such a line the maps are off for the run: decided once,
    when training starts, in one warning saying what to set. The probe drawn is recorded in the run
    folder (``probe.txt``): the tinylm tab opens the run on it. The causal mask for the probe's length
    is logged once, as ``maps/causal_mask``, when training starts.

    With each set of images, and every ``weights_every_n_steps`` steps between them (null: only with the
    images), the raw weights go into the event file as one small tensor summary, ``tinylm/probe_attention``
    (``weights_summary``: float16, (layers, heads, T, T), 2.6 KiB for the default model and probe), for
    the tinylm plugin's Training view: a forward pass of the probe, no figure. ``weights_max_kib`` caps
    their total per run: past it, the weights are no longer logged (said once); the images go on.
    """

    def __init__(self, every_n_steps: int | None = 500, text: str = "自注意力可以让序列",
                 weights_every_n_steps: int | None = 50, weights_max_kib: int = 512):
        super().__init__(every_n_steps)
        self.weights_every_n_steps = validate_interval("AttentionMaps.weights", weights_every_n_steps)
        if not isinstance(text, str):
            raise TinyLMError(f"AttentionMaps.text={text!r} must be a string")
        check_value("AttentionMaps.weights_max_kib", weights_max_kib, integer(0),
                    " (KiB of raw attention weights logged per run; 0: none)")
        self.text = text
        self.weights_left = weights_max_kib * 1024 or -1  # bytes of raw weights still allowed this run (-1: none)
        self._ids: list[int] | None = None  # [] once decided that there is no probe this run
        self._labels: list[str] = []
        self._pieces: list[str] = []  # each probe token's own text, for the raw weights' summary
        self._weights_step: int | None = None  # the last step whose raw weights were logged
        self._figures: dict = {}  # plotting.attention_figure's reused figures: drawn once, refilled

    def probe_ids(self, trainer, tokenizer: Tokenizer, block_size: int) -> list[int]:
        """The probe's token ids (at most block_size), or [] when there is none (said once)."""
        if known_probe(self.text, tokenizer.unknown) is not None:
            text = without_unknown(tokenizer, self.text, "attention probe text")  # names the skipped ones
        else:
            try:
                text = training_text_opening(trainer, tokenizer, OPENING_CHARS)
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
        """Decide the probe once per run: its ids and labels, or [] (no maps) also when this fails; a probe
        decided is recorded in the run folder (``record_in_run_folder``)."""
        if self._ids is None:
            self._ids = []
            tokenizer = tokenizer_from_state(module.tokenizer_state)
            self._ids = self.probe_ids(trainer, tokenizer, module.model.config.block_size)
            self._labels = plotting.token_labels(tokenizer, self._ids)
            self._pieces = [tokenizer.decode_piece([i]) for i in self._ids]
            if self._ids:
                record_in_run_folder(trainer, tokenizer.decode(self._ids))

    def _probe_writer(self, trainer, module):
        """TensorBoard's writer, the probe decided; None without a writer or without a probe to draw."""
        writer = tensorboard_writer(trainer)
        if writer is None:
            return None
        self._prepare(trainer, module)
        return writer if self._ids else None

    def log_causal_mask(self, trainer, module) -> None:
        writer = self._probe_writer(trainer, module)
        if writer is None:
            return
        T = len(self._ids)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))  # (T, T) True = visible
        image = plotting.render_rgb(plotting.causal_mask_figure(mask, self._labels))
        add_rgb_image(writer, "maps/causal_mask", image, trainer.global_step)

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.is_global_zero and self.has_attention(trainer, pl_module):
            self.timed("AttentionMaps (causal mask)", trainer.global_step,
                       lambda: self.log_causal_mask(trainer, pl_module))

    def inspect(self, trainer, module) -> None:
        writer = self._probe_writer(trainer, module)
        if writer is None:
            return
        step = trainer.global_step
        ids = torch.tensor(self._ids, device=module.device)  # (T,)
        maps = plotting.attention_weights(module.model, ids)  # per layer (h, T, T)
        for layer, weights in enumerate(maps):
            figure = plotting.attention_figure(weights, self._labels, layer, note=f"step {step}",
                                               reuse=self._figures)
            add_rgb_image(writer, f"maps/attention_layer{layer}", plotting.render_rgb(figure), step)
        self.log_weights(writer, maps, step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)  # the images, with their weights
        every, step = self.weights_every_n_steps, trainer.global_step
        if (every and step % every == 0 and step != self._weights_step and self.weights_left >= 0
                and trainer.is_global_zero and self.has_attention(trainer, pl_module)):
            self.timed("AttentionMaps (weights)", step, lambda: self.inspect_weights(trainer, pl_module))

    def inspect_weights(self, trainer, module) -> None:
        """The raw weights alone, between two sets of images."""
        writer = self._probe_writer(trainer, module)
        if writer is not None:
            ids = torch.tensor(self._ids, device=module.device)  # (T,)
            self.log_weights(writer, plotting.attention_weights(module.model, ids), trainer.global_step)

    def log_weights(self, writer, maps: list[torch.Tensor], step: int) -> None:
        """The raw weights as ``weights_summary``, once per step, while the run's cap allows (past it: said once)."""
        from torch.utils.tensorboard import SummaryWriter

        size = sum(w.numel() for w in maps) * 2  # float16
        if not isinstance(writer, SummaryWriter) or self.weights_left < 0 or step == self._weights_step:
            return
        if size > self.weights_left:
            log.warning("AttentionMaps: the raw attention weights reached AttentionMaps.weights_max_kib; not logged "
                        "from step %d on (the images go on)", step)
            self.weights_left = -1
            return
        self.weights_left -= size
        self._weights_step = step
        writer._get_file_writer().add_summary(weights_summary(maps, self._pieces), step)
