"""Circuits of a trained Transformer, read from its weights and one run (Elhage et al., "A Mathematical
Framework for Transformer Circuits"; TransformerLens's direct logit attribution, OV/QK circuits and
composition scores):

- ``dla.direct_logit_attribution``: each part of the final residual stream's share of the next token's logit
  (``dla.json``);
- ``ov_qk``: each head's OV and QK circuits over the vocabulary, its positional QK and its copying and
  previous-token scores (``head_circuits``: ``circuits.json``);
- ``composition.composition_scores``: Q-, K- and V-composition between heads of different layers
  (``composition.json``);
- ``neurons.neuron_examples``: each MLP neuron's strongest positions in a text and the characters it pushes
  (``neurons.json``).

They work through the models' interface and hook points (``parts``); an LSTM/GRU gets one TinyLMError line.
"""

from tinylm.analysis.circuits.composition import composition_scores
from tinylm.analysis.circuits.dla import direct_logit_attribution
from tinylm.analysis.circuits.neurons import neuron_examples
from tinylm.analysis.circuits.ov_qk import head_circuits, ov_circuit, positional_qk, qk_circuit

__all__ = ["composition_scores", "direct_logit_attribution", "head_circuits", "neuron_examples", "ov_circuit",
           "positional_qk", "qk_circuit"]
