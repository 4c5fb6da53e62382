"""The options of each command that runs a checkpoint, described once: a table of ``tinylm.values.Option``
(key, rule, hint) per command, checked in order by ``tinylm.values.check_options`` before the checkpoint is
looked for. The training command's table is ``tinylm.training.config_checks.RULES``; export.py and
visualize.py take only paths and text."""

from __future__ import annotations

from omegaconf import ListConfig

from tinylm.generation.prompting import SAMPLING
from tinylm.values import FLAG, Option, choice, integer, nullable, number, rule

THREADS = Option("threads", nullable(integer(1), ", or null"))  # torch's (or ONNX Runtime's) intra-op threads

GENERATE = (
    *SAMPLING,
    Option("seed", nullable(integer(), ", or null for a fresh one")),
    THREADS,
    Option("use_cache", FLAG),
    Option("prompt_max_mib", number(0, brackets="(]"), " (MiB), e.g. 1"),
    Option("ablate", rule(lambda v: v is None or isinstance(v, ListConfig | list), "a list of layer.head"),
           ", e.g. ablate=[0.2,1.3]"),
    Option("beam_size", integer(1), " (1: no beam search)"),
)

EVALUATE = (
    Option("split", choice({"val": "training's validation split", "all": "the whole text"})),
    Option("stride", nullable(integer(1, wanted="an integer from 1 to the model's block_size"),
                              ", or null for block_size // 2")),
    Option("batch_size", integer(1), " (windows per forward pass)"),
    THREADS,
)

ANALYZE = (
    Option("induction_draws", integer(1), " (random strings to average the induction score over)"),
    Option("seed", integer(), " (it draws the random strings)"),
    Option("dla_position", nullable(integer(0), ", or null for the last position"),
           " (the position of the text whose next character dla's figure attributes)"),
    Option("dla_against", nullable(rule(lambda v: isinstance(v, str) and len(v) == 1, "one character"), ", or null"),
           " (dla attributes the logit difference target - against)"),
    Option("neurons_k", integer(1), " (each neuron's strongest positions kept)"),
    Option("neurons_context", integer(0), " (characters shown before each neuron's position)"),
    Option("neurons_text", nullable(rule(lambda v: isinstance(v, str) and bool(v), "a text"), ", or null"),
           " (any length, read in windows: where the neurons' strongest positions are looked for; null: the "
           "run's validation text)"),
    THREADS,
)
