"""Continuing a text: its data, sampling and the torch-free text side, and its TensorBoard views."""
