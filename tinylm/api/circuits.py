"""The circuits from Python (``tinylm.analysis.circuits``), as ``LM`` methods: each returns the dict that
``analyze.py`` writes as its JSON file (docs/python.md, "Circuits").

    lm.dla("the text", against=None)   # dla.json: each part's share of the next character's logit, per position
    lm.circuits()                      # circuits.json: every head's copying and positional previous-token scores
    lm.composition()                   # composition.json: Q-, K-, V-composition [earlier head][later head]
    lm.neurons(text=None, k=5)         # neurons.json: each MLP neuron's top positions (None: in the run's
                                       # validation text) and the characters it pushes
    lm.show_circuits(text=None)        # the tinylm tab's Circuits view in a notebook cell (.save("x.html"))
    lm.show_neurons(text=None)         # its Neurons view: click a neuron, see its examples

The OV and QK matrices themselves: ``tinylm.analysis.circuits.ov_circuit(lm.model, layer, head)`` and
``qk_circuit``. An LSTM/GRU: one TinyLMError line saying what applies.
"""

from __future__ import annotations

from tinylm.errors import TinyLMError
from tinylm.tasks import is_encoder_decoder


class CircuitsMixin:
    """Direct logit attribution, OV/QK circuits, composition scores and neurons, for ``LM``."""

    def dla(self, text, against: str | None = None, target: str | None = None) -> dict:
        """Direct logit attribution over ``text`` (a decoder: each position's next character; an encoder-decoder:
        ``text`` is the source, each character of ``target`` (None: its greedy translation) and the end)."""
        from tinylm.analysis.circuits import direct_logit_attribution
        from tinylm.analysis.circuits.parts import require_heads

        require_heads(self.model)
        inputs = self.inputs(text, target)
        if not is_encoder_decoder(self.model):
            return direct_logit_attribution(self.model, inputs[0][0].tolist(), self.tokenizer, against)
        from tinylm.models.seq2seq import END_ID

        tgt = inputs[1][0].tolist()
        return direct_logit_attribution(self.model, tgt, self.tokenizer, against, source=inputs[0][0].tolist(),
                                        targets=[*tgt[1:], END_ID])

    def circuits(self) -> dict:
        """Every head's copying score (its OV circuit) and positional previous-token score (its positional QK)."""
        from tinylm.analysis.circuits import head_circuits

        return head_circuits(self.model, self.tokenizer)

    def composition(self, seed: int = 0) -> dict:
        """Q-, K- and V-composition between every head and every head of a later layer, and the random baseline
        (``seed`` draws it)."""
        from tinylm.analysis.circuits import composition_scores

        return composition_scores(self.model, seed)

    def neurons(self, text: str | None = None, k: int = 5, context: int = 8) -> dict:
        """Each MLP neuron's ``k`` strongest positions in ``text`` and the characters its output pushes up most. A
        long text is read in windows. None: the run's validation text, as ``evaluate.py split=val`` scores it (its
        first 64k characters, ``tinylm.analysis.circuits.texts``); where the run's data file is missing, the probe
        the run recorded when training started, with a printed line saying so. The dict's "source" says which
        ("text", "validation", "probe") and "length" how many characters were read."""
        from tinylm.analysis.circuits import neuron_examples
        from tinylm.analysis.circuits.parts import require_heads
        from tinylm.analysis.circuits.texts import neurons_text

        require_heads(self.model)
        if is_encoder_decoder(self.model):
            raise TinyLMError("neurons: the encoder-decoder's neurons are not read here; its cross-attention heads "
                              "are (lm.dla, lm.circuits)")
        text, source, why = neurons_text(self.loaded, text, None, "the run's recorded probe")
        if text is None:
            text = self._recorded_probe()
        if not text:
            raise TinyLMError('neurons: pass text="..." (characters of the training text)')
        if why:
            print(why)
        if missing := self.tokenizer.unknown(text):
            from tinylm.tokenizer import unknown_characters

            raise unknown_characters(self.tokenizer, "text", missing, "use characters of the training text")
        found = neuron_examples(self.model, self.tokenizer, self.tokenizer.encode(text), k, context)
        return {**found, "source": source, "length": len(text)}

    def show_circuits(self, text: str | None = None, heads=None):
        """The tinylm tab's "Circuits" view of ``text`` (None: the run's probe) in a notebook cell: the direct logit
        attribution at each position and summed, the heads' OV circuits (copying) and QK circuits, the
        composition scores (``tinylm.explorer.standalone.circuits_view``; ``.save("view.html")`` writes it).
        ``heads`` (e.g. ["1.0"]): the heads whose OV and QK it holds (None: every head, or with a large vocabulary
        those that copy most)."""
        from tinylm.explorer import standalone

        return standalone.circuits_view(self.loaded, text, heads=heads)

    def show_neurons(self, text: str | None = None):
        """The tinylm tab's "Neurons" view of ``text`` (None: the run's probe) in a notebook cell: click a neuron
        to see where it fires most, in context, and the characters it pushes up."""
        from tinylm.explorer import standalone

        return standalone.neurons_view(self.loaded, text)

    def _recorded_probe(self) -> str | None:
        from tinylm.run_folder import PROBE_FILE

        path = self.loaded.path
        if path is None:
            return None
        for folder in (path.parent, path.parent.parent):
            if (folder / PROBE_FILE).is_file():
                return (folder / PROBE_FILE).read_text(encoding="utf-8")
        return None
