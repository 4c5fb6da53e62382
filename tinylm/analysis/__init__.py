"""Experiments on a trained model (``analyze.py``, ``generate.py ablate=``, the ``HeadScores`` callback):
hooks that switch heads off or copy activations (``hooks``), one text through a model (``probe``), head
scores and ablation (``heads``), the logit lens (``lens``), activation patching (``patching``), an
encoder-decoder's cross-attention heads (``translation``), the grids they are drawn as (``figures``).
What analyze.py runs are registered analyses (``registry``), one module each in ``experiments/``, and
``runner`` writes their files, REPORT.md and the printed table."""
