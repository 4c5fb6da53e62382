"""Score a checkpoint on every position of a text's validation split (or of a whole text):

    python evaluate.py                                          # newest run's best checkpoint, its own data
    python evaluate.py run_dir=outputs/runs/<time> stride=64
    python evaluate.py ckpt_path=path/to/model.ckpt data.path=input.txt split=all

Which text: ``data.path``, else the one the checkpoint's run trained on (its run folder's
recorded ``config.yaml``), else the shipped corpus. The other data keys (val_fraction, repeat,
encoding, ...) come from that run config unless given, so ``split=val`` is exactly training's
validation text, encoded with the checkpoint's tokenizer. How windows cover it: tinylm/tasks/text/evaluation.py.
What is scored is the checkpoint's task's (``tinylm.tasks``, ``Task.evaluate``): a checkpoint trained on
translation pairs is scored on every validation pair: loss, exact match and character error rate of
greedy translations.

stdout: one line naming the checkpoint and what was scored, then one JSON line with loss (nats per
token), bpc (bits per character, as training's loss/val_bpc) and tokens (positions scored).
See conf/evaluate.yaml.
"""

import glob
import json
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from tinylm.cli import resolve_path, run_command
from tinylm.commands import checkpoint_from_config, launch
from tinylm.commands.options import EVALUATE
from tinylm.console import checkpoint_name
from tinylm.errors import TinyLMError
from tinylm.run_folder import CHECKPOINTS_DIR, CONF_DIR, HYDRA_DIR
from tinylm.tasks import get_task
from tinylm.tasks.data_file import missing_data_file
from tinylm.values import check_options, one_line

PATH_KEYS = ("ckpt_path", "run_dir", "data.path", "paths.log_dir")
DATA_KEYS = ("path", "val_fraction", "repeat", "encoding", "errors", "max_mib")  # conf/evaluate.yaml's data keys
DEFAULT_SEED = 1337  # conf/train.yaml's seed: what a checkpoint without a run config was most likely drawn with


def check_data_path(cfg: DictConfig) -> None:
    """Refuse a data.path that names nothing before the checkpoint is even looked for."""
    path = resolve_path(cfg.data.path)
    if path is not None and not glob.has_magic(path) and not Path(path).exists():  # a glob is the data module's
        raise TinyLMError(missing_data_file(path))


def run_config(checkpoint: Path) -> DictConfig | None:
    """The training config of a checkpoint's run (its recorded ``config.yaml``, for a checkpoint in a run folder), with
    ``data.path`` absolute as training resolved it; None if there is none."""
    hydra_dir = checkpoint.resolve().parent.parent / HYDRA_DIR
    if checkpoint.resolve().parent.name != CHECKPOINTS_DIR or not (hydra_dir / "config.yaml").is_file():
        return None
    try:
        cfg = OmegaConf.load(hydra_dir / "config.yaml")
        data = OmegaConf.to_container(cfg.data, resolve=True)
        seed = OmegaConf.select(cfg, "seed", default=DEFAULT_SEED)
        launched = OmegaConf.select(OmegaConf.load(hydra_dir / "hydra.yaml"), "hydra.runtime.cwd", default=None) \
            if (hydra_dir / "hydra.yaml").is_file() else None
    except Exception as e:  # yaml, interpolation and key errors of a damaged or hand-edited file
        raise TinyLMError(f"{hydra_dir / 'config.yaml'} could not be read ({type(e).__name__}: "
                          f"{one_line(e, 150)}): pass data.path=... and the data keys, "
                          "or fix that file") from None
    if data.get("path") and launched:  # relative paths were relative to where training was launched
        data["path"] = str(Path(launched) / data["path"])
    return OmegaConf.create({"data": data, "seed": seed})


def build_data(cfg: DictConfig, loaded, checkpoint: Path):
    """The data module training used (its run config, else the task's data module), with this command's
    data keys on top and what the task's data module takes from the model; not prepared."""
    task = get_task(loaded.task)
    saved = run_config(checkpoint)
    if saved is not None:
        data, seed = OmegaConf.to_container(saved.data), saved.seed
    else:
        data, seed = {"_target_": task.data_target}, DEFAULT_SEED
    for key in DATA_KEYS:
        if cfg.data[key] is not None:
            data[key] = hydra.utils.to_absolute_path(str(cfg.data[key])) if key == "path" else cfg.data[key]
    try:  # the model's arguments win over a run config's (the decoder-only flag of earlier releases)
        return hydra.utils.instantiate(data, block_size=loaded.model.config.block_size, seed=seed,
                                       **task.data_arguments(type(loaded.model)))
    except Exception as e:  # a key the data module does not take, a _target_ that does not import
        raise TinyLMError(f"the data config {data} cannot build a data module "
                          f"({one_line(e, 150)})") from None


def run(cfg: DictConfig) -> dict:
    check_options(cfg, EVALUATE)  # before the checkpoint is even looked for
    check_data_path(cfg)
    path, why = checkpoint_from_config(cfg)  # torch is imported once there is a checkpoint to load
    import torch

    from tinylm.checkpoint import load_model

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    loaded = load_model(path, why)
    datamodule = build_data(cfg, loaded, path)
    line, scores = get_task(loaded.task).evaluate(cfg, loaded, datamodule)  # text: every position; pairs: every pair
    result = {"loss": scores.pop("loss"), "bpc": scores.pop("bpc"), "tokens": scores.pop("tokens"), **scores,
              "split": cfg.split, "checkpoint": str(path), "step": loaded.global_step}
    name = checkpoint_name(path, why, f"step {loaded.global_step}", f"{loaded.model.num_params():,} parameters")
    print(f"evaluated {name} on {line}")
    print(json.dumps(result, ensure_ascii=False))
    return result


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="evaluate")
def main(cfg: DictConfig) -> None:
    run_command(run, cfg)


def run_command_line() -> None:
    launch(main, "evaluate", (), PATH_KEYS)
