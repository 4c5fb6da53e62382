"""What a translation model (``data=pairs``) learns, in TensorBoard.

- ``TranslationSamples``: ``source → prediction (reference)`` for fixed validation pairs (Text tab).
- ``TranslationMaps``: the cross-attention of every decoder layer (rows: the characters the model
  writes, columns: the source characters) and the encoder's self-attention, for one source
  (Images tab); a decoder-only model's attention over source + BEGIN + its translation.
"""

from __future__ import annotations

from tinylm.callbacks.attention import AttentionInspector, add_rgb_image, record_in_run_folder
from tinylm.callbacks.inspector import PeriodicInspector, tensorboard_writer
from tinylm.errors import TinyLMError
from tinylm.models.seq2seq import BEGIN_ID
from tinylm.plots import figures as plotting
from tinylm.tasks import is_encoder_decoder
from tinylm.tasks.translation.batches import pad
from tinylm.tasks.translation.decoding import continue_sources, translate
from tinylm.tasks.translation.figures import translation_figures
from tinylm.tokenizer import tokenizer_from_state, unknown_characters
from tinylm.values import check_value, integer


def validation_pairs(trainer, count: int) -> list[tuple[list[int], list[int]]]:
    """The first ``count`` held-out (source ids, target ids) pairs of the training run's data."""
    pairs = getattr(trainer.datamodule, "val_examples", None)
    if not pairs:
        raise TinyLMError("no validation pairs to translate: train with data=pairs")
    return pairs[:count]


class TranslationSamples(PeriodicInspector):
    """Greedy translations of the first ``count`` validation pairs, as ``translations`` in the Text tab.

    Each line: ``source → prediction (reference)``, marked ✓ when the prediction is exact.
    """

    def __init__(self, every_n_steps: int | None = 250, count: int = 8):
        super().__init__(every_n_steps)
        check_value("TranslationSamples.count", count, integer(1))
        self.count = count

    def inspect(self, trainer, module) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None:
            return
        tokenizer = tokenizer_from_state(module.tokenizer_state)
        pairs = validation_pairs(trainer, self.count)
        if is_encoder_decoder(type(module.model)):
            predictions = translate(module.model, pad([s for s, _ in pairs]).to(module.device))
        else:  # source + BEGIN, continued
            predictions = continue_sources(module.model, [[*s, BEGIN_ID] for s, _ in pairs])
        lines = [f"Step {trainer.global_step}, greedy: source → prediction (reference)", ""]
        for (source, reference), prediction in zip(pairs, predictions, strict=True):
            mark = "✓" if prediction == reference else "✗"
            lines.append(f"- {mark} `{tokenizer.decode(source)}` → `{tokenizer.decode(prediction)}` "
                         f"(`{tokenizer.decode(reference)}`)")
        writer.add_text("translations", "\n".join(lines), trainer.global_step)


class TranslationMaps(AttentionInspector):
    """Cross-attention and encoder self-attention heatmaps of one source, a panel per head.

    ``source``: the text to translate; null takes the first validation pair's source. Logged as
    ``maps/cross_attention_layer<N>`` (rows: the characters the model writes, the last one the
    end symbol; columns: the source) and ``maps/encoder_layer<N>``; for a decoder-only model,
    ``maps/pair_attention_layer<N>`` (source + BEGIN + translation). The source drawn is recorded in the run
    folder (``probe.txt``): the tinylm tab's Translation view opens on it.
    """

    def __init__(self, every_n_steps: int | None = 250, source: str | None = None):
        super().__init__(every_n_steps)
        if source is not None and (not isinstance(source, str) or not source):
            raise TinyLMError(f"TranslationMaps.source={source!r} must be a non-empty string or null")
        self.source = source
        self._figures: dict = {}  # plotting.attention_figure's reused figures

    def source_ids(self, trainer, module) -> list[int]:
        if self.source is None:
            return validation_pairs(trainer, 1)[0][0]
        tokenizer = tokenizer_from_state(module.tokenizer_state)
        if missing := tokenizer.unknown(self.source):
            tokenizer.origin = "this run's training data"
            raise unknown_characters(tokenizer, f"TranslationMaps.source={self.source!r}", missing,
                                     "use characters of the training pairs, or null for the first validation source")
        if len(self.source) > module.model.config.block_size:
            raise TinyLMError(f"TranslationMaps.source={self.source!r} is longer than model.block_size="
                              f"{module.model.config.block_size}")
        return tokenizer.encode(self.source)

    def inspect(self, trainer, module) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None:
            return
        tokenizer = tokenizer_from_state(module.tokenizer_state)
        step = trainer.global_step
        source = self.source_ids(trainer, module)
        record_in_run_folder(trainer, tokenizer.decode(source))
        figures = translation_figures(module.model, tokenizer, source, note=f"step {step}", reuse=self._figures)
        for name, figure in figures:
            add_rgb_image(writer, f"maps/{name}", plotting.render_rgb(figure), step)
