"""``EmbeddingProjector``: the token embeddings with their characters, in the Projector tab."""

from __future__ import annotations

from tinylm.callbacks.inspector import PeriodicInspector, tensorboard_writer
from tinylm.plots import figures as plotting
from tinylm.tokenizer import tokenizer_from_state


class EmbeddingProjector(PeriodicInspector):
    """The token embedding matrix (V, C) with one visible label per token, for the Projector tab.

    By default only when training ends (``every_n_steps: null``): each call writes a full copy.
    Every task shows it.

    ``metadata.tsv`` has the labels alone, one a line, no header: TensorBoard's projector names that
    column ``label`` and labels by it from the start (its "Label by" default is the first column
    that is not all numbers), so hovering or clicking a point shows its character. Its 3D-labels
    mode (the "A" button) draws character codes 0-255 only: no CJK there.
    """

    def __init__(self, every_n_steps: int | None = None):
        super().__init__(every_n_steps)

    def inspect(self, trainer, module) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None:
            return
        tokenizer = tokenizer_from_state(module.tokenizer_state)
        weight = module.model.token_embeddings().detach().float().cpu()  # (V, C)
        labels = plotting.token_labels(tokenizer, range(weight.size(0)))
        writer.add_embedding(weight, metadata=labels, global_step=trainer.global_step,
                             tag="token_embedding")
