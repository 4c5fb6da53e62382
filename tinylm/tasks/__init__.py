"""What tinylm learns to do: continue a text (``text``) or translate pairs (``translation``)."""
