"""``tinylm.load(source) -> LM``: a checkpoint in your own Python session (docs/python.md).

``LM`` holds the checkpoint's model and tokenizer (``lm.model``, ``lm.tokenizer``, ``lm.loaded``) and does what
the commands do with them, through the same code, so the figures and texts agree:

- ``generate``: ``generate.py``'s sampling loop (``tinylm.generation``), heads switched off as its ``ablate=``
  does; a translation checkpoint translates each line, as ``generate.py`` does (``translate``: greedy by default);
- ``score``: ``evaluate.py``'s windows and loss (``tinylm.tasks.text``) on a text you pass;
- ``run_with_cache`` / ``run_with_hooks``: one forward pass of batch size 1 through the model's named hook
  points (``tinylm.models.hook_points``), in eval mode without gradients;
- ``show`` / ``show_heads``: the explorer's views in a notebook cell (``tinylm.explorer.standalone``);
- ``save_pretrained`` / ``to_transformer_lens``: the Hugging Face layout and TransformerLens (``tinylm.api.interop``).

A text is read whole, never cut: one longer than the model reads at once (a Transformer's ``block_size``) is
one TinyLMError line for ``run_with_cache``/``run_with_hooks``; ``generate`` slides its window as
``generate.py`` does and ``score`` covers a long text in windows as ``evaluate.py`` does. Characters outside
the vocabulary are the one line the commands give.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterable

import torch
from torch.nn import functional as F

from tinylm.api.circuits import CircuitsMixin
from tinylm.api.interop import InteropMixin
from tinylm.api.loading import Source, load_checkpoint
from tinylm.console import checkpoint_name
from tinylm.errors import TinyLMError
from tinylm.models.base import eval_no_grad
from tinylm.tasks import is_encoder_decoder
from tinylm.tasks.base import LoadedModel, bits_per_char
from tinylm.values import check_options

SCORED = "the text"  # how score's messages name the text it was given


def load(source: Source = None) -> LM:
    """A checkpoint file, a run folder, a sweep job's folder, a saved model folder (``lm.save_pretrained``), or
    None (the newest run's best checkpoint under ``outputs/``, as ``generate.py`` picks it) as an ``LM``; a source
    that cannot be loaded: one TinyLMError."""
    return LM(load_checkpoint(source))


class LM(CircuitsMixin, InteropMixin):
    """A trained model and its tokenizer, ready to generate, score, run with hooks and show."""

    def __init__(self, loaded: LoadedModel):
        self.loaded = loaded

    @classmethod
    def from_model(cls, model, tokenizer, task: str = "text") -> LM:
        """An ``LM`` of a model you built (``tinylm.GPT(tinylm.GPTConfig(...))``) and its tokenizer, not of a file."""
        return cls(LoadedModel(model.eval(), tokenizer, None, None, task, "built in this session"))

    @property
    def model(self):
        """The ``nn.Module`` (``tinylm.GPT``, ``tinylm.RNNLanguageModel`` or ``tinylm.Seq2Seq``)."""
        return self.loaded.model

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def task(self) -> str:
        """What it was trained for: "text" (continue a text) or "translation" (source<TAB>target pairs)."""
        return self.loaded.task

    def __repr__(self) -> str:
        """What it is, its architecture as ``print(model)`` shows it, and the parameter table ``train.py`` prints."""
        facts = [f"step {self.loaded.global_step}", f"{self.task} task",
                 f"vocabulary {self.tokenizer.vocab_size} ({self.tokenizer.kind})"]
        source = (checkpoint_name(self.loaded.path, self.loaded.why, *facts) if self.loaded.path is not None
                  else f"a model {self.loaded.why} ({', '.join(facts[1:])})")
        return f"tinylm.LM of {source}\n{self.model!r}\n\n{self.model.format_parameter_table()}"

    # ------------------------------------------------------------------------------------------------------
    # The hook points

    def hook_points(self) -> dict:
        """Every hook point by name (``blocks.0.attn.hook_pattern``, ...), in the order of the forward pass."""
        return self.model.hook_points()

    @property
    def hook_names(self) -> list[str]:
        return list(self.model.hook_points())

    def to_tokens(self, text: str) -> torch.Tensor:
        """``text``'s ids (1, T), on the model's device; one TinyLMError for an empty text, characters outside the
        vocabulary, or more tokens than the model reads at once."""
        from tinylm.cli import encode_text

        window = self.model.config.block_size if is_encoder_decoder(self.model) else self.model.context_window
        ids = encode_text(self.tokenizer, text, sys.maxsize if window is None else window)  # an RNN reads any length
        return torch.tensor([ids], dtype=torch.long, device=self.device)

    def to_string(self, ids) -> str:
        """Ids (a list, or a tensor of any shape holding one sequence) as text."""
        return self.tokenizer.decode(torch.as_tensor(ids).flatten().tolist())

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def inputs(self, text, target: str | None = None) -> tuple[torch.Tensor, ...]:
        """What the model's forward takes for ``text``: its ids (1, T) (ids given instead of a text, (T,) or (B, T),
        are taken as they are); an encoder-decoder's source ids (1, S) and target (1, T): BEGIN + ``target``, or
        BEGIN + its greedy translation of the source when None."""
        if isinstance(text, str):
            ids = self.to_tokens(text)
        else:
            ids = torch.as_tensor(text, dtype=torch.long, device=self.device)
            ids = ids[None] if ids.dim() == 1 else ids
        if not is_encoder_decoder(self.model):
            if target is not None:
                raise TinyLMError(f"target= is an encoder-decoder's target text, and this is a "
                                  f"{self.model.config.arch} model, which reads one text: pass the whole text")
            return (ids,)
        from tinylm.api.translation import decoder_input

        written = None if target is None else self.to_tokens(target)[0].tolist() if target else []
        return ids, decoder_input(self.model, ids, written)

    def run_with_cache(self, text: str, names_filter=None, target: str | None = None):
        """``logits, cache``: the logits (1, T, V) of one forward pass over ``text`` (what ``model(ids)`` gives),
        and an ``ActivationCache`` of what the hook points ``names_filter`` picks saw (all by default: a name, a
        list of names or a function ``name -> bool``). An encoder-decoder reads ``text`` as its source and
        ``target`` as what it writes (``inputs``)."""
        args = self.inputs(text, target)
        with eval_no_grad(self.model):
            (logits, _), cache = self.model.run_with_cache(*args, names_filter=names_filter)
        return logits, cache

    def run_with_hooks(self, text: str, fwd_hooks: Iterable = (), target: str | None = None) -> torch.Tensor:
        """The logits (1, T, V) of one forward pass over ``text`` with ``fwd_hooks`` attached: ``(names, fn)``
        pairs, ``fn(tensor, hook)`` returning a replacement tensor or None (as in TransformerLens). They are
        removed afterwards, also after an error."""
        args = self.inputs(text, target)
        with eval_no_grad(self.model):
            logits, _ = self.model.run_with_hooks(*args, fwd_hooks=list(fwd_hooks))
        return logits

    # ------------------------------------------------------------------------------------------------------
    # What the commands do

    def generate(self, prompt: str = "", max_new_tokens: int = 200, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None, ablate: Iterable = (), stop: str | None = None,
                 unknown: str = "error", use_cache: bool = True, beam_size: int = 1) -> str:
        """The text ``generate.py`` prints for one sample with these settings (conf/generate.yaml's defaults): the
        prompt and its continuation, without the final newline it adds and with control characters as they are.
        ``seed`` None draws a fresh one; ``ablate``: heads switched off, ``["0.2", "1.3"]``, ``[(0, 2)]`` or "0.2,1.3";
        ``stop``: end right after this text. A translation checkpoint translates each line of ``prompt`` (one
        line out per line in, joined by newlines), by beam search when ``beam_size`` > 1."""
        from tinylm.analysis.hooks import heads_switched_off
        from tinylm.commands.options import GENERATE

        ablate = head_names(ablate)
        check_options({"temperature": temperature, "top_k": top_k, "top_p": top_p, "max_new_tokens": max_new_tokens,
                       "num_samples": 1, "seed": seed, "threads": None, "use_cache": use_cache, "prompt_max_mib": 1,
                       "ablate": ablate, "beam_size": beam_size}, GENERATE)
        seed = secrets.randbelow(2**31) if seed is None else seed
        generator = torch.Generator().manual_seed(seed)
        sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "generator": generator,
                    "use_cache": use_cache}
        with heads_switched_off(self.model, ablate):
            if self.task == "translation":
                from tinylm.api.translation import translations

                return translations(self.model, self.tokenizer, prompt, unknown, beam_size, **sampling)
            from tinylm.generation.prompting import encode_prompt
            from tinylm.generation.sampling import stream_text

            prompt_ids = encode_prompt(self.tokenizer, prompt, unknown)
            shown = self.tokenizer.decode(prompt_ids) if prompt else ""  # an empty prompt starts unseen (print_samples)
            return shown + "".join(stream_text(self.model, self.tokenizer, prompt_ids, max_new_tokens, stop=stop,
                                               **sampling))

    def translate(self, source: str, beam_size: int = 1, temperature: float = 0.0, **settings) -> str:
        """A translation checkpoint's translation of each line of ``source``, greedy by default (``generate``'s
        other settings apply); a text checkpoint: one TinyLMError (it continues text: ``generate``)."""
        if self.task != "translation":
            raise TinyLMError(f"{self._name()} continues text and translates nothing: use lm.generate(prompt)")
        return self.generate(source, temperature=temperature, beam_size=beam_size, **settings)

    def score(self, text: str, stride: int | None = None, batch_size: int = 32) -> dict:
        """``{"loss", "bits_per_char", "tokens"}`` of every position of ``text``, the figures ``evaluate.py``
        prints for it (``data.path=<a file of text> split=all``; its ``loss``, ``bpc`` and ``tokens``): windows of
        block_size starting every ``stride`` tokens (None: block_size // 2). A text of at most block_size tokens,
        which ``evaluate.py`` refuses, is one window: each of its tokens after the first, predicted."""
        from tinylm.commands.options import EVALUATE

        if self.task != "text":
            raise TinyLMError(f"{self._name()} translates source<TAB>target pairs, and lm.score scores a text: score "
                              f"its pairs with `python evaluate.py ckpt_path={self.loaded.path}`")
        check_options({"split": "all", "stride": stride, "batch_size": batch_size, "threads": None}, EVALUATE)
        if not text:
            raise TinyLMError("the text is empty: pass a text to score")
        if self.tokenizer.unknown(text):
            self._evaluated(text, stride, batch_size)  # raises evaluate.py's line for them
        ids = torch.tensor(self.tokenizer.encode(text))
        if len(ids) < 2:
            raise TinyLMError("the text is 1 token long: scoring predicts each token after the first, "
                              "pass a longer text")
        scores = self._evaluated(text, stride, batch_size) if len(ids) > self.model.config.block_size \
            else self._one_window(ids)
        return {"loss": scores["loss"], "bits_per_char": bits_per_char(scores["loss"], len(text) / len(ids)),
                "tokens": scores["tokens"]}

    def _evaluated(self, text: str, stride: int | None, batch_size: int) -> dict:
        """``evaluate.py``'s scores of ``text`` (``TextTask.evaluate`` on it, as on a file with split=all)."""
        from omegaconf import OmegaConf

        from tinylm.tasks import get_task

        cfg = OmegaConf.create({"stride": stride, "split": "all", "batch_size": batch_size})
        return get_task("text").evaluate(cfg, self.loaded, _GivenText(text))[1]

    def _one_window(self, ids: torch.Tensor) -> dict:
        """The mean loss of ``ids[1:]`` predicted from ``ids[:-1]`` in one forward pass (as score_text sums it)."""
        ids = ids.long().to(self.device)
        with eval_no_grad(self.model):
            logits = self.model(ids[None, :-1])[0]  # (1, N-1, V)
            losses = F.cross_entropy(logits[0].float(), ids[1:], reduction="none")  # (N-1,)
        return {"loss": float(losses.double().sum() / len(losses)), "tokens": len(losses)}

    # ------------------------------------------------------------------------------------------------------
    # Views

    def show(self, text: str | None = None, **settings):
        """The explorer's view of ``text`` in a notebook cell (``tinylm.explorer.standalone``; None: the run's probe
        text): every layer's and head's attention, the next characters, the logit lens, heads switched off by
        clicking; a translation checkpoint: its translation of ``text`` with the cross-attention.
        ``.save("view.html")`` writes it as one HTML file that opens offline."""
        from tinylm.explorer import standalone

        if self.task == "translation":
            if settings:
                raise TinyLMError(f"show: a translation model's view takes only the source text, not "
                                  f"{', '.join(settings)}: lm.show(source)")
            return standalone.translation_view(self.loaded, text)
        if "ablate" in settings:
            settings["ablate"] = head_names(settings["ablate"])
        return standalone.text_view(self.loaded, text, **settings)

    def show_heads(self, **settings):
        """The head scores (previous token, induction, ...) as a view in a notebook cell."""
        from tinylm.explorer import standalone

        return standalone.heads_view(self.loaded, **settings)

    def _name(self) -> str:
        return f"checkpoint {self.loaded.path}" if self.loaded.path is not None else "this model"


def head_names(ablate) -> list:
    """``ablate`` as "layer.head" names: a list of them or of (layer, head) pairs, or one string "0.2,1.3"."""
    if isinstance(ablate, str):
        return [head.strip() for head in ablate.split(",") if head.strip()]
    return [f"{head[0]}.{head[1]}" if isinstance(head, tuple | list) else head for head in ablate or ()]


class _GivenText:
    """A text given in Python where ``TextTask.evaluate`` reads a data module's split (``split=all``)."""

    path = SCORED
    val_fraction = 0.0

    def __init__(self, text: str):
        self.text = text

    def read_split(self) -> tuple[str, str]:
        return self.text, ""
