"""Train tinylm: `python train.py` (reference model on the embedded corpus), or e.g.

    python train.py model.num_layers=2 model.n_embd=32
    python train.py data.path=my_text.txt trainer.max_steps=3000
    python train.py -m model.n_embd=32,64 model.num_heads=2,4      # a sweep, one folder per job
    python train.py ckpt_path=last trainer.max_steps=2000          # continue the newest run
    python train.py -m hydra/launcher=joblib hydra.launcher.n_jobs=2 model.n_embd=32,64   # jobs in parallel
    python train.py -m model.n_embd=32,64 hydra.sweep.dir=last    # finish the newest sweep

See conf/train.yaml for every option and README.md for more.
"""

import sys

try:  # Ctrl-C while Python is still starting: stop quietly, like any interrupted program
    import os
    from pathlib import Path

    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import DictConfig

    from tinylm.cli import TRAIN_FOLDER_KEYS, TRAIN_PATH_KEYS, few_collections, quote_values
    from tinylm.errors import TinyLMError
    from tinylm.runs.folder import register_resolvers
    from tinylm.tasks import refuse_derived
except KeyboardInterrupt:
    sys.exit(130)

ROOT = Path(__file__).resolve().parent
# Run folders and caches live under the project folder, wherever the command is launched from.
os.environ.setdefault("TINYLM_ROOT", str(ROOT))


def check_quickly(cfg: DictConfig) -> None:
    """Refuse a bad value before torch and Lightning are imported (``validate(cfg, quick=True)``): one
    ``error:`` line, also in a new run's train.log, as the training job says every error
    (``tinylm.runs.job``, which checks the whole config again, with torch)."""
    from tinylm.training.config_checks import validate
    from tinylm.training.logs import log_error_to_files

    try:
        validate(cfg, quick=True)
    except TinyLMError as e:
        if not cfg.ckpt_path:  # a resume writes nothing into its run folder until it is checked
            log_error_to_files(f"error: {e}")
        raise SystemExit(f"error: {e}") from None


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    if HydraConfig.get().mode == RunMode.RUN:  # a sweep job says a bad config in its own folder (error.txt)
        check_quickly(cfg)
    with few_collections():
        from tinylm.runs.job import main as train_main

    return train_main(cfg)


if __name__ == "__main__":
    try:
        refuse_derived(sys.argv[1:])  # a setting that follows from another one: one error line
        in_sweep = {"-m", "--multirun"} & set(sys.argv)  # there data.path=a.txt,b.txt means two jobs
        sys.argv = quote_values(sys.argv, TRAIN_FOLDER_KEYS if in_sweep else TRAIN_PATH_KEYS)
        if any(arg.lstrip("+").startswith("ckpt_path=") for arg in sys.argv[1:]):
            from tinylm.runs.resume import plan_resume  # torch and the checkpoint reader: only for a resume

            sys.argv = plan_resume(sys.argv, ROOT / "conf")  # a resume continues the run as it was configured
        if in_sweep and any(arg.startswith("hydra.sweep.dir=") for arg in sys.argv):
            from tinylm.runs.sweep_resume import newest_sweep

            sys.argv = newest_sweep(sys.argv, ROOT / "conf")  # hydra.sweep.dir=last: the newest sweep folder
        register_resolvers()
        main()
    except TinyLMError as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:  # before training started (once it has, Ctrl-C saves and exits 130)
        print("\ninterrupted before training started: nothing was saved", file=sys.stderr)
        sys.exit(130)
