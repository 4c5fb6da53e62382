"""The training job: config -> data -> model -> Trainer.fit -> metrics.

``train(cfg)`` is the whole job, in-process: what a test or a notebook calls with a composed
config. Its steps are ``prepare`` (check the config, set the threads, seed; it resolves the config's task
and model class once, into a ``Run`` the other steps take), ``build`` (the data and the LightningModule)
and ``fit`` (train, measure, return the metrics). The run manager's job
wrapper (``tinylm.runs.job``, behind ``train.py``) calls the steps itself: it claims the run
folder, checks a resume between the data (``build_datamodule``) and the model (``build_module``), and
writes the job's files. Nothing here imports the run manager.
"""

from __future__ import annotations

import logging
import math
import re
import signal
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import NamedTuple

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import InstantiationException
from hydra.types import RunMode
from lightning.pytorch.callbacks import EarlyStopping, TQDMProgressBar
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig, OmegaConf

from tinylm import models
from tinylm.callbacks.inspector import PeriodicInspector
from tinylm.cli import resolve_path
from tinylm.errors import TinyLMError
from tinylm.models import LanguageModel, configured
from tinylm.run_folder import CHECKPOINTS_DIR
from tinylm.tasks import model_class_of, task_of_config, views_left_out
from tinylm.tasks.base import Task, bits_per_char
from tinylm.training.config_checks import validate
from tinylm.training.logs import expected_checkpoints, quiet_lightning
from tinylm.training.module import LitLanguageModel, score_tag
from tinylm.training.safety import AtomicCheckpointIO, GracefulInterrupt
from tinylm.values import one_line

log = logging.getLogger(__name__)
# how a run executes or where it writes, not what it trains: no HParams column
NOT_SETTINGS = ("ckpt_path", "paths", "callbacks", "logger", "threads", "compile")


class Run(NamedTuple):
    """A training config and what it names, resolved once: its task and its model class."""

    cfg: DictConfig
    task: Task
    model_class: type[LanguageModel]


def build_datamodule(run: Run) -> L.LightningDataModule:
    """The data group's ``_target_``, with the model's context length, the run's seed, the path as launched
    and what the task's data module takes from the model."""
    cfg = run.cfg
    return hydra.utils.instantiate(cfg.data, path=resolve_path(cfg.data.path), block_size=cfg.model.block_size,
                                   seed=cfg.seed, **run.task.data_arguments(run.model_class))


def build_module(run: Run, datamodule: L.LightningDataModule) -> LitLanguageModel:
    """The LightningModule around the network of the run's model class (with the data's vocabulary),
    trained by the optimizer partial ``optim._target_`` names."""
    cfg = run.cfg
    model = OmegaConf.to_container(cfg.model, resolve=True)
    config = configured(run.model_class, {**model, "vocab_size": datamodule.tokenizer.vocab_size})
    module = LitLanguageModel(
        net=models.build(run.model_class, config),
        tokenizer=datamodule.tokenizer.state(),
        optimizer=hydra.utils.instantiate(cfg.optim, _convert_="all"),  # plain lists: checkpoints hold plain data
        chars_per_token=datamodule.val_chars_per_token,
        task=run.task,
    )
    module.data_identity = datamodule.identity  # recorded in its checkpoints
    if cfg.compile:
        # In place: the parameters keep their names, so checkpoints load compiled or not.
        module.model.compile()
        if cfg.trainer.get("accelerator") == "cpu" or not torch.cuda.is_available():
            log.warning("compile=true on a CPU: the first steps compile for up to a minute, and "
                        "small models train slower than without it (see docs/performance.md)")
    return module


def prepare(cfg: DictConfig, threads: int | None = None) -> Run:
    """Before anything is built: check the config, quiet Lightning's log, set PyTorch's threads and seed;
    the run the config describes.

    The threads are the config's ``threads=``, else ``threads`` (a parallel sweep job's share of the
    cores), else PyTorch's default; they are set before the first torch op starts its thread pool.
    """
    task = task_of_config(cfg)
    validate(cfg, task=task)
    run = Run(cfg, task, model_class_of(cfg))
    quiet_lightning()
    if cfg.threads or threads:
        torch.set_num_threads(cfg.threads or threads)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    return run


def build(run: Run) -> tuple[L.LightningDataModule, LitLanguageModel]:
    """The data module, its text read and tokenized, and the LightningModule that trains on it."""
    datamodule = build_datamodule(run)
    datamodule.prepare()
    return datamodule, build_module(run, datamodule)


def train(cfg: DictConfig, ckpt_path: str | None = None) -> dict:
    """Seed, build, fit and measure the run ``cfg`` describes, in ``cfg.paths.output_dir``; return its metrics.

    ``ckpt_path`` continues a checkpoint, as it is (the run manager checks a resume first).
    """
    run = prepare(cfg)
    datamodule, module = build(run)
    return fit(run, datamodule, module, Path(cfg.paths.output_dir), resolve_path(ckpt_path))


def instantiate_all(group: DictConfig | None, leave_out: Collection[str] = ()) -> list:
    """Instantiate every ``_target_`` entry of a callbacks/logger group but those named in ``leave_out``;
    an entry the config switches off (null, or a factory below that builds nothing) adds nothing.

    A TinyLMError raised by a constructor (a bad option value) is re-raised as is, so it reaches
    the user as one ``error:`` line instead of being wrapped in Hydra's InstantiationException.
    """
    if not group:
        return []
    try:
        built = [hydra.utils.instantiate(node) for name, node in group.items()
                 if node and "_target_" in node and name not in leave_out]
    except InstantiationException as e:
        if isinstance(e.__cause__, TinyLMError):
            raise e.__cause__ from None
        raise
    return [thing for thing in built if thing is not None]


def early_stopping(monitor: str, patience: int | None, min_delta: float,
                   check_on_train_epoch_end: bool) -> EarlyStopping | None:
    """conf/callbacks/default.yaml's early_stopping: none while ``patience`` is null (Lightning's EarlyStopping
    has no "never"), so the entry stays in the config and ``callbacks.early_stopping.patience=3`` turns it on."""
    if patience is None:
        return None
    return EarlyStopping(monitor=monitor, patience=patience, min_delta=min_delta,
                         check_on_train_epoch_end=check_on_train_epoch_end)


def progress_bar(enabled: bool, refresh_rate: int) -> TQDMProgressBar | None:
    """conf/callbacks/default.yaml's progress_bar, ``enabled`` by ``trainer.enable_progress_bar``: Lightning
    refuses a bar callback when that is false, so then there is none."""
    return TQDMProgressBar(refresh_rate=refresh_rate) if enabled else None


def refuse_relaunch_in_sweep(trainer: L.Trainer) -> None:
    """Refuse DDP started by Lightning itself inside a local multirun, before any rank starts.

    Lightning starts ranks 1..N-1 by re-running this process's command line with rank 0's
    ``hydra.run.dir``. In a multirun that command line is the whole sweep: each extra rank would run
    every job again, pairing with rank 0's jobs in the wrong order and writing stray folders.
    Under SLURM or torchrun the ranks are started from outside and nothing is re-run.
    """
    in_sweep = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    launcher = trainer.strategy.launcher  # None for one process
    starts_ranks_itself = (launcher is not None and not launcher.is_interactive_compatible
                           and not trainer.strategy.cluster_environment.creates_processes_externally)
    if in_sweep and trainer.num_devices > 1 and starts_ranks_itself:
        raise TinyLMError(
            "multi-process DDP cannot run inside a local sweep (-m): Lightning starts the other ranks by "
            "re-running the command line, which would re-run the whole sweep; train DDP jobs one at a time, "
            "or run the sweep on SLURM with hydra/launcher=slurm (SLURM starts one task per rank)"
        )


# how the collective backends say that the other end of the job is gone (a node or a process died)
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "NCCL communicator was aborted",
             "ProcessGroupNCCL", "DistBackendError", "DistNetworkError", "Socket Timeout", "timed out")


def peer_reason(error: BaseException, limit: int = 240) -> str:
    """The backend's reason in one sentence: gloo's source location (``[.../pair.cc:537] ``) left out, cut after
    the first sentence (its advice follows), or at a word within ``limit`` characters."""
    text = re.sub(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp|py):\d+\]\s*", "", one_line(str(error)))
    first = re.match(r".*?[.!?](?=\s|$)", text)
    if first is not None and len(first.group()) <= limit:
        return first.group()
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


@contextmanager
def lost_ranks(trainer: L.Trainer, output_dir: Path) -> Iterator[None]:
    """In a job of several ranks, a rank that loses the others (a node or a process died, its connection
    closed) ends with one line saying so and how to continue, instead of the backend's traceback."""
    try:
        yield
    except RuntimeError as e:  # torch.distributed's DistBackendError and gloo's errors are RuntimeErrors
        text = f"{type(e).__name__}: {e}"
        if trainer.world_size < 2 or not any(sign in text for sign in PEER_GONE):
            raise
        last = output_dir / CHECKPOINTS_DIR / "last.ckpt"
        saved = f"its last checkpoint is {last}" if last.is_file() else "no checkpoint was saved yet"
        raise TinyLMError(
            f"rank {trainer.global_rank} of {trainer.world_size} lost the other ranks at step {trainer.global_step} "
            f"(a node or a process of the job died: {peer_reason(e)}); the job is over, {saved}: start the "
            "same command with ckpt_path=last on every node to continue it"
        ) from None


def finite_or_none(value: float) -> float | None:
    """JSON has no NaN: a value that is not a finite number is written as null."""
    return value if math.isfinite(value) else None


def fit(run: Run, datamodule: L.LightningDataModule, module: LitLanguageModel, output_dir: Path,
        ckpt_path: str | None, starting: Callable[[], object] | None = None) -> dict:
    """Trainer.fit for the run in ``output_dir``, from ``ckpt_path`` if given; return its metrics.

    The data and the model's parameter table are shown first; the HParams summary and the final log
    line follow the fit (rank 0). ``starting`` is called right before Trainer.fit: what is refused
    before it (a callback's bad option) was refused before training started.
    """
    cfg = run.cfg
    log.info("data: %s", datamodule.summary())
    print(module.model.format_parameter_table())
    loggers = instantiate_all(cfg.get("logger"))
    interrupt = GracefulInterrupt()
    # the task's views and the shared ones: the other tasks' views are never built
    callbacks = [*instantiate_all(cfg.get("callbacks"), leave_out=views_left_out(run.task)), interrupt]
    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False, plugins=[AtomicCheckpointIO()]
    )
    refuse_relaunch_in_sweep(trainer)
    if starting:
        starting()
    started = time.perf_counter()
    # a resume into its own folder finds its checkpoints there: Lightning's warning about them is noise
    own = ckpt_path and Path(ckpt_path).parent == output_dir / CHECKPOINTS_DIR
    with expected_checkpoints(output_dir / CHECKPOINTS_DIR) if own else nullcontext(), lost_ranks(trainer, output_dir):
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    wall = time.perf_counter() - started

    val_loss = trainer.callback_metrics.get("loss/val")
    val_loss = float(val_loss) if val_loss is not None else math.nan
    val_bpc = bits_per_char(val_loss, datamodule.val_chars_per_token)
    steps = trainer.global_step - module.start_step
    stopping = trainer.early_stopping_callback
    metrics = {
        "val_loss": finite_or_none(val_loss),
        "val_bpc": finite_or_none(val_bpc),
        "best_val_loss": finite_or_none(module.best_val_loss),
        "best_step": module.best_step,
        "num_params": module.model.num_params(),
        "steps": trainer.global_step,
        "tokens_per_second": steps * datamodule.batch_size * cfg.model.block_size / wall,
        "wall_seconds": wall,
    }
    # the task's validation scores (Task.validation_scores), as logged: the last validation's
    scores = {name: float(trainer.callback_metrics[score_tag(name)]) for name in module.score_names
              if score_tag(name) in trainer.callback_metrics}
    metrics.update({f"val_{name}": value for name, value in scores.items()})
    for callback in trainer.callbacks:  # e.g. the final head scores (tinylm.analysis.callback.HeadScores)
        if isinstance(callback, PeriodicInspector):
            metrics.update(callback.run_metrics())
    metrics["interrupted"] = interrupt.interrupted_at is not None
    metrics["interrupted_by"] = signal.Signals(interrupt.signal).name if metrics["interrupted"] else None
    # stopped by early stopping before trainer.max_steps (a resumed run keeps the reason of an earlier stop)
    metrics["stopped_early"] = bool(stopping and stopping.stopping_reason_message and not metrics["interrupted"]
                                    and trainer.global_step < cfg.trainer.max_steps)
    if trainer.is_global_zero:
        log_hparams(trainer, cfg, metrics)
        if metrics["stopped_early"]:
            log.info("stopped early at step %d of trainer.max_steps=%d: %s did not improve in %d validations",
                     trainer.global_step, cfg.trainer.max_steps, stopping.monitor, stopping.wait_count)
        log.info("%s; run folder %s", final_result(cfg, metrics, scores, module.task.score_words), output_dir)
    return metrics


def final_result(cfg: DictConfig, metrics: dict, scores: dict[str, float], words: dict[str, str]) -> str:
    """What the final log line says of the run's result: the last val loss, the task's scores (worded
    as the task names them) and the best val loss; or that no validation ran, and why where it is known."""
    if metrics["val_loss"] is None:  # a non-finite loss stops training (LitLanguageModel._check_finite)
        if cfg.trainer.get("limit_val_batches") == 0:
            debug = HydraConfig.get().runtime.choices.get("debug") if HydraConfig.initialized() else None
            return f"no validation ran ({f'debug={debug}: ' if debug else ''}trainer.limit_val_batches=0)"
        return "no validation ran" + (" (interrupted before the first one)" if metrics["interrupted"] else "")
    parts = [f"final val loss {metrics['val_loss']:.4f} ({metrics['val_bpc']:.3f} bits/char)"]
    parts += [f"{words.get(name, name)} {value:.3f}" for name, value in scores.items()]
    if metrics["best_val_loss"] is not None:
        parts.append(f"best {metrics['best_val_loss']:.4f} at step {metrics['best_step']}")
    return ", ".join(parts)


def chosen_settings(cfg: DictConfig) -> dict:
    """What the command line chose for this run (in a sweep: the swept settings and those all jobs
    share), and the seed: the columns that tell runs apart in TensorBoard's HParams tab. The whole
    config is in the run's recorded config.yaml."""
    keys = ["seed"]
    if HydraConfig.initialized():
        overrides = OverridesParser.create().parse_overrides(list(HydraConfig.get().overrides.task))
        keys += [o.key_or_group for o in overrides if not o.is_delete()]
    chosen = {}
    for key in dict.fromkeys(keys):
        value = OmegaConf.select(cfg, key, default=None)
        if key.split(".")[0] not in NOT_SETTINGS and value is not None and not isinstance(value, DictConfig):
            chosen[key.replace(".", "/")] = value if isinstance(value, int | float | str | bool) else str(value)
    return chosen


def log_hparams(trainer: L.Trainer, cfg: DictConfig, metrics: dict) -> None:
    """TensorBoard's HParams tab: the run's chosen settings next to its final and best val loss."""
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            scores = {"summary/val_loss": metrics["val_loss"], "summary/val_bpc": metrics["val_bpc"],
                      "summary/best_val_loss": metrics["best_val_loss"], "summary/best_step": metrics["best_step"],
                      "summary/num_params": metrics["num_params"]}
            logger.log_hyperparams(chosen_settings(cfg), {k: v for k, v in scores.items() if v is not None})
            # written after fit has closed the logger: flush now, or a run's last events are lost at exit
            logger.finalize("success")
