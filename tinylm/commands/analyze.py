"""Experiments on a trained model: which heads matter, what each layer predicts, where an answer lives.

    python analyze.py                                   # newest run's best checkpoint, default text
    python analyze.py run_dir=outputs/runs/<time> text="自注意力可以让序列中的每个位置"
    python analyze.py ckpt_path=path/to/model.ckpt ablation=mean out_dir=experiments
    python analyze.py text="注意力可以" corrupt_text="注意力不可"   # + activation patching

Writes into ``out_dir`` (default: ``<run folder>/analysis/``) and prints a short table:

- ``heads.json``: per layer and head its previous-token, induction and entropy scores and how much
  the loss on the text rises when it is switched off (``tinylm.analysis.heads``);
- ``logit_lens.json``: the prediction after each block (``tinylm.analysis.lens``);
- with ``corrupt_text`` (as many tokens as ``text``): ``patching.json``, what copying each
  activation from the clean run into the corrupt one restores (``tinylm.analysis.patching``);
- a figure of each, and ``REPORT.md`` saying how to read them.

Each is one registered analysis (``tinylm/analysis/experiments/``, ``tinylm.analysis.registry``): analyze
runs every one that applies to the checkpoint and the options, and REPORT.md lists them.

An encoder-decoder (``model=seq2seq``): ``text`` holds source lines (``\n`` between them) and
``target`` their references (null: the model's own translations); heads.json scores its
cross-attention heads, switched off on the loss and on exact match, and the logit lens reads the
decoder (``tinylm.analysis.translation``). An LSTM or GRU has no heads and no residual stream: it
gets one line saying so. See conf/analyze.yaml for every option.
"""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from tinylm.cli import check_out_dir, run_command, writing_into
from tinylm.commands import checkpoint_from_config, launch
from tinylm.commands.options import ANALYZE
from tinylm.errors import TinyLMError
from tinylm.run_folder import CHECKPOINTS_DIR, CONF_DIR
from tinylm.values import check_options

TEXT_KEYS = ("text", "corrupt_text", "target", "dla_against", "neurons_text")  # free text, taken literally
PATH_KEYS = ("ckpt_path", "run_dir", "out_dir", "paths.log_dir")


def check_ablation(ablation: object) -> None:
    """``ablation=``, once torch is imported (the ablations are those of ``tinylm.analysis.heads``)."""
    from tinylm.analysis.heads import ABLATIONS

    if ablation not in ABLATIONS:
        raise TinyLMError(f"ablation={ablation!r}: choose zero (a head's output set to 0) or mean (set to its "
                          "mean over the text)")


def default_out_dir(checkpoint: Path) -> Path:
    """``<run folder>/analysis`` for a run's checkpoint, else ``<checkpoint name>-analysis`` beside it."""
    if checkpoint.parent.name == CHECKPOINTS_DIR:
        return checkpoint.parent.parent / "analysis"
    return checkpoint.parent / f"{checkpoint.stem}-analysis"


def require_heads(loaded) -> None:
    if not loaded.model.attention_layers():
        raise TinyLMError(
            f"checkpoint {loaded.path} holds an {loaded.model.config.arch} model: it has no attention heads and no "
            "residual stream, so head scores, ablation, the logit lens, patching and the circuits (direct logit "
            "attribution, OV/QK, composition, neurons) do not apply to it; "
            "evaluate.py (its loss and bits per character) and generate.py do")


def run(cfg: DictConfig) -> dict:
    check_options(cfg, ANALYZE)  # before the checkpoint is even looked for (and torch imported)
    path, why = checkpoint_from_config(cfg)
    out_dir = Path(hydra.utils.to_absolute_path(cfg.out_dir)) if cfg.out_dir else default_out_dir(path)
    check_out_dir(out_dir)  # torch is imported once there is a checkpoint to load and a folder to write into
    import torch

    from tinylm.analysis import runner
    from tinylm.analysis.experiments import registered
    from tinylm.checkpoint import load_model

    check_ablation(cfg.ablation)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    loaded = load_model(path, why)
    require_heads(loaded)
    subject = runner.subject(loaded, cfg)  # a decoder's text, an encoder-decoder's source lines
    out_dir.mkdir(parents=True, exist_ok=True)
    with writing_into(out_dir, "the results"):
        result = runner.analyze(subject, registered(), out_dir)
    print(result["printed"])
    return result


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="analyze")
def main(cfg: DictConfig) -> None:
    run_command(run, cfg)


def run_command_line() -> None:
    launch(main, "analyze", TEXT_KEYS, PATH_KEYS)
