"""Write a checkpoint's attention heatmaps as PNG files, for users who do not run TensorBoard:

    python visualize.py run_dir=outputs/runs/<time> text="自注意力可以让序列"
    python visualize.py run_dir=outputs/runs/<time> out_dir=attention_pngs
    python visualize.py                      # newest run's best checkpoint, default text

One file per layer, ``attention_layer<N>.png``, with a panel per head: the same figures the
``AttentionMaps`` training callback logs to TensorBoard. See conf/visualize.yaml for the options.

The checkpoint's task draws the figures (``tinylm.tasks``). For a translation model
(``model=seq2seq``) ``text`` is the source: the files show how the model turns it into its translation:
``cross_attention_layer<N>.png`` (rows: the characters it writes, columns: the source characters)
and ``encoder_layer<N>.png``, as the ``TranslationMaps`` callback logs them:

    python visualize.py ckpt_path=numbers.ckpt text="三千零五"
"""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from tinylm.checkpoint import load_model
from tinylm.cli import check_out_dir, encode_text, run_command, writing_into
from tinylm.commands import checkpoint_from_config, launch
from tinylm.console import say_checkpoint
from tinylm.run_folder import CONF_DIR
from tinylm.tasks import get_task

TEXT_KEYS = ("text",)  # free text, taken literally
PATH_KEYS = ("ckpt_path", "run_dir", "out_dir", "paths.log_dir")


def run(cfg: DictConfig) -> list[Path]:
    path, why = checkpoint_from_config(cfg)
    out_dir = (Path(hydra.utils.to_absolute_path(cfg.out_dir)) if cfg.out_dir
               else path.parent / f"{path.stem}-attention")
    check_out_dir(out_dir)  # torch is imported once there is a checkpoint to load and a folder to draw into
    from tinylm.plots import figures as plotting

    loaded = load_model(path, why)
    ids = encode_text(loaded.tokenizer, "" if cfg.text is None else str(cfg.text),
                      loaded.model.config.block_size)
    say_checkpoint(path, why, loaded.global_step, loaded.tokenizer.vocab_size, loaded.model.num_params())
    note = f"{path.name}, step {loaded.global_step}"
    with writing_into(out_dir, "the PNGs"):  # the task's figures: a language model's attention, a translation's
        figures = get_task(loaded.task).figures(loaded, ids, note)
        written = [plotting.save_png(figure, out_dir / f"{name}.png") for name, figure in figures]
    for png in written:
        print(png)
    return written


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="visualize")
def main(cfg: DictConfig) -> None:
    run_command(run, cfg)


def run_command_line() -> None:
    launch(main, "visualize", TEXT_KEYS, PATH_KEYS)
