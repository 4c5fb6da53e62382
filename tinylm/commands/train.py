"""Train tinylm: `python train.py` (reference model on the embedded corpus), or e.g.

    python train.py model.num_layers=2 model.n_embd=32
    python train.py data.path=my_text.txt trainer.max_steps=3000
    python train.py -m model.n_embd=32,64 model.num_heads=2,4      # a sweep, one folder per job
    python train.py ckpt_path=last trainer.max_steps=2000          # continue the newest run
    python train.py -m hydra/launcher=joblib hydra.launcher.n_jobs=2 model.n_embd=32,64   # jobs in parallel
    python train.py -m model.n_embd=32,64 hydra.sweep.dir=last    # finish the newest sweep

See conf/train.yaml for every option and README.md for more.
"""

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from tinylm.cli import TRAIN_FOLDER_KEYS, TRAIN_PATH_KEYS, few_collections, quote_values
from tinylm.errors import EXIT_INTERRUPTED, TinyLMError
from tinylm.run_folder import CONF_DIR
from tinylm.runs.folder import discard_new_folder, newest_sweep_dir, note_given_run_dir, register_resolvers
from tinylm.runs.layout import check_layout
from tinylm.runs.ranks import folder_named, launch, requeued_run, shared_run_folder
from tinylm.tasks import refuse_derived


def check_command_line(argv: list[str], in_sweep: bool) -> None:
    """Refuse an override Hydra cannot apply (a misspelled key, a config a group does not have) and, for a
    new run, a bad value (``validate(cfg, quick=True)``), before Hydra makes the run folder and before
    torch and Lightning are imported: one ``error:`` line, and no folder. A resume's values are checked
    once its run's overrides are known; a sweep's by each job (in its folder's error.txt)."""
    from tinylm.cli import resolve_path
    from tinylm.precheck import composed, is_multirun
    from tinylm.run_folder import find_checkpoint
    from tinylm.tasks.data_file import download
    from tinylm.training.config_checks import READS_DATA_PATH, validate

    try:
        cfg = composed("train", argv, CONF_DIR)
    except TinyLMError as e:
        raise TinyLMError(f"invalid config: {e}") from None
    if cfg is None:  # Hydra's own flags: Hydra's to answer
        return
    in_sweep = in_sweep or is_multirun(cfg)  # hparams_search=optuna sweeps without -m
    if cfg.ckpt_path and cfg.ckpt_path != "last":  # a file that is not there (a folder, a FIFO): said before torch
        find_checkpoint(os.path.abspath(os.path.expanduser(str(cfg.ckpt_path))))
    if in_sweep and cfg.hydra.sweep.dir == "last":  # no sweep to finish: said before torch
        try:
            newest_sweep_dir(cfg.paths.log_dir)
        except TinyLMError as e:
            raise TinyLMError(f"hydra.sweep.dir=last: {e}") from None
    if not in_sweep and not cfg.ckpt_path:
        validate(cfg, quick=True)
        data = cfg.data  # a data set to download: now, so that offline is one line and no folder
        if data.get("url") and data.get("_target_") in READS_DATA_PATH and not Path(resolve_path(data.path)).exists():
            download(data.url, Path(resolve_path(data.path)), data.get("sha256"))
    if not in_sweep:  # a new hydra.run.dir, a resume's too, is this run's: a refusal removes it
        note_given_run_dir(argv)
        check_layout(cfg.trainer)  # SLURM's tasks or torchrun's processes against devices x num_nodes


def check_quickly(cfg: DictConfig) -> None:
    """Refuse a bad value of a run that ``check_command_line`` did not check (a resume, a command line with
    Hydra's flags) before torch and Lightning are imported: one ``error:`` line; a folder made for this run
    is removed, an existing folder gets the line in its train.log (a resume's: nothing, until it is checked)."""
    from tinylm.training.config_checks import validate
    from tinylm.training.logs import log_error_to_files

    try:
        validate(cfg, quick=True)
    except TinyLMError as e:
        if not discard_new_folder(cfg.paths.output_dir) and not cfg.ckpt_path:
            log_error_to_files(f"error: {e}")
        raise SystemExit(f"error: {e}") from None


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def main(cfg: DictConfig) -> float | None:
    if HydraConfig.get().mode == RunMode.RUN:  # a sweep job says a bad config in its own folder (error.txt)
        check_quickly(cfg)
        folder_named(cfg.paths.output_dir)  # rank 0 of a torchrun or SLURM job tells the other ranks
    with few_collections():
        from tinylm.runs.job import main as train_main

    return train_main(cfg)


def run_command_line(resumed_check=None) -> None:
    """``python train.py``'s command line (sys.argv). ``resumed_check(argv)``: called on the arguments a resume
    (``ckpt_path=...``) brings back, before anything is built (``tinylm.train`` refuses a sweep there)."""
    try:
        refuse_derived(sys.argv[1:])  # a setting that follows from another one: one error line
        in_sweep = {"-m", "--multirun"} & set(sys.argv)  # there data.path=a.txt,b.txt means two jobs
        sys.argv = quote_values(sys.argv, TRAIN_FOLDER_KEYS if in_sweep else TRAIN_PATH_KEYS)
        check_command_line(sys.argv, bool(in_sweep))
        if not in_sweep:  # a SLURM job that SLURM requeued continues the run its earlier attempt trained
            sys.argv = requeued_run(sys.argv, CONF_DIR)
        if any(arg.lstrip("+").startswith("ckpt_path=") for arg in sys.argv[1:]):
            from tinylm.runs.resume import plan_resume  # torch and the checkpoint reader: only for a resume

            sys.argv = plan_resume(sys.argv, CONF_DIR)  # a resume continues the run as it was configured
            if resumed_check is not None:
                resumed_check(sys.argv[1:])
        if in_sweep and any(arg.startswith("hydra.sweep.dir=") for arg in sys.argv):
            from tinylm.runs.sweep_resume import newest_sweep

            sys.argv = newest_sweep(sys.argv, CONF_DIR)  # hydra.sweep.dir=last: the newest sweep folder
        register_resolvers()
        with shared_run_folder(None if in_sweep else launch(), sys.argv, CONF_DIR):  # one folder for all ranks
            main()
    except TinyLMError as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:  # before training started (once it has, Ctrl-C saves and exits 130)
        print("\ninterrupted before training started: nothing was saved", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
