"""Figures of the model's internals: the heatmaps, their page layout, and matplotlib's rendering."""
