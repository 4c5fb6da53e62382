"""Lightning callbacks that show what the model learns while it trains, in TensorBoard.

- ``SampleText``: text generated from fixed prompts with a fixed seed (Text tab).
- ``AttentionMaps``: per-layer attention heatmaps of a fixed probe text, and the causal mask once
  (Images tab).
- ``NextTokenProbes``: the probability of an expected next character after a context, e.g.
  ``probe/Transforme→r``, to watch a rule being learned (Scalars tab).
- ``EmbeddingProjector``: the token embedding matrix with character labels (Projector tab).
- ``ShapeTrace``: prints every stage of one forward pass with its tensor shape (``debug=shapes``).
- ``TranslationSamples`` and ``TranslationMaps``: a translation model's greedy translations of
  validation pairs (Text tab) and its cross-attention and encoder heatmaps (Images tab).

The periodic ones run every ``every_n_steps`` optimizer steps and once more when training ends.
They are observers: they run on rank 0 only, in eval mode without gradients, and a failure in
one of them is logged as a warning and skipped, so a plotting problem never stops a training run.

One module per callback; ``inspector`` holds what they share. The config names them as
``tinylm.callbacks.<Name>``.
"""

from tinylm.callbacks.attention_maps import AttentionMaps
from tinylm.callbacks.embedding_projector import EmbeddingProjector
from tinylm.callbacks.inspector import PeriodicInspector, training_text_opening
from tinylm.callbacks.next_token_probes import NextTokenProbes
from tinylm.callbacks.sample_text import SampleText, samples_markdown
from tinylm.callbacks.shape_trace import ShapeTrace
from tinylm.callbacks.translation import TranslationMaps, TranslationSamples

__all__ = ["AttentionMaps", "EmbeddingProjector", "NextTokenProbes", "PeriodicInspector", "SampleText",
           "ShapeTrace", "TranslationMaps", "TranslationSamples", "samples_markdown", "training_text_opening"]
