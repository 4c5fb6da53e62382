"""Run the comparisons of the reference experiment and write their answers to one folder.

    python -m tinylm.compare positions|tokenizers|rnn|schedules|tricks|seq2seq|all [--steps N] [--data PATH]
        [--max-chars N] [--bpe-vocab-size N] [--seeds N] [--out DIR] [--rerun] [train.py overrides ...]

Each comparison trains a few variants of the same run (same data, seed, steps, batch and block),
one ``train.py`` process per variant, into ``<out>/<comparison>/<variant>/`` (an ordinary run
folder: its metrics, TensorBoard events, checkpoints, so ``generate.py run_dir=...`` works on it):

- positions:  learned table | fixed sin/cos | rotary (rope)
- tokenizers: char | byte | BPE (``data.bpe_vocab_size``), compared in bits per character
- rnn:        the GPT | an LSTM | a GRU (``model=lstm``), val loss vs parameters vs tokens/s
- schedules:  constant learning rate | warmup + cosine decay | gradient clipping | both
- tricks:     the speedrun tricks (RMSNorm, ReLU², QK-norm, logit soft-cap, tied head, Muon, schedules,
  clipping) each alone against the baseline, then the combination of those that helped; --seeds
  runs of each (``<variant>/seed<k>/``), scored by ``evaluate.py`` at equal steps and from the
  validation curves at equal wall time, with the cost per step (``tinylm.compare.scores``); not part of ``all``
- seq2seq:    translation pairs: the encoder-decoder | a decoder-only GPT reading source + BEGIN +
  target, at a similar parameter count, compared on exact match (not part of ``all``: other data)

A variant whose folder already holds a finished run with the same settings is read, not run
again, so an interrupted comparison continues where it stopped and a finished one only rebuilds
the report. Every comparison includes the reference run (learned, char, gpt, constant_lr are one
and the same training config): once trained, it is copied into the other comparisons' folders.

Then ``<out>/REPORT.md`` gets one table per comparison (a row per variant, built by
``tinylm.runs.sweep_report`` from each run's metrics) and ``<out>/<comparison>/curves.png`` the
validation curves of its variants on one chart, read from the TensorBoard event files.

The package reads in the order of the work: ``spec`` (what each comparison trains), ``runner``
(train or reuse each variant), ``scores`` (evaluate.py and the curves of seeded runs), ``report`` (tables
and curves), ``command`` (the command line).
"""

from tinylm.compare.command import data_override, main
from tinylm.compare.report import scalar_curve, write_report
from tinylm.compare.runner import copy_run, finished, same_run_elsewhere, training_config
from tinylm.compare.spec import Comparison, comparisons

__all__ = ["Comparison", "comparisons", "copy_run", "data_override", "finished", "main", "same_run_elsewhere",
           "scalar_curve", "training_config", "write_report"]
