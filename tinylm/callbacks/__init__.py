"""Lightning callbacks that every task shares; each task's own views are in ``tinylm.tasks``.

- ``PeriodicInspector``: the base of every view that runs every ``every_n_steps`` optimizer steps
  and once more when training ends. They are observers: they run on rank 0 only, in eval mode
  without gradients, and a failure in one of them is logged as a warning and skipped, so a
  plotting problem never stops a training run.
- ``EmbeddingProjector``: the token embedding matrix with character labels (Projector tab).
- ``ShapeTrace``: prints every stage of one forward pass with its tensor shape (``debug=shapes``).
- ``attention``: what every task's attention views share (``AttentionInspector``, ``add_rgb_image``).

The text task's views (samples, attention maps, next-token probes) are in ``tinylm.tasks.text``,
the translation task's (translations, cross-attention maps) in ``tinylm.tasks.translation``.
"""

from tinylm.callbacks.embedding_projector import EmbeddingProjector
from tinylm.callbacks.inspector import PeriodicInspector, training_text_opening
from tinylm.callbacks.shape_trace import ShapeTrace

__all__ = ["EmbeddingProjector", "PeriodicInspector", "ShapeTrace", "training_text_opening"]
