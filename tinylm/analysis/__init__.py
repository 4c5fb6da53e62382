"""Experiments on a trained model (``analyze.py``, ``generate.py ablate=``, the ``HeadScores`` callback):
hooks that switch heads off or copy activations (``hooks``), one text through a model (``probe``), head
scores and ablation (``heads``), the logit lens (``lens``), activation patching (``patching``), an
encoder-decoder's cross-attention heads (``translation``), figures and the report (``figures``, ``report``),
and what analyze.py runs (``experiments``)."""
