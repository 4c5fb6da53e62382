"""Translating source<TAB>target pairs: the data, decoding and scores, the demo pairs, and its TensorBoard views."""
