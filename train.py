"""Train tinylm: `python train.py` (reference model on the embedded corpus), or e.g.

    python train.py model.num_layers=2 model.n_embd=32
    python train.py data.path=my_text.txt trainer.max_steps=3000
    python train.py -m model.n_embd=32,64 model.num_heads=2,4      # a sweep, one folder per job

See conf/train.yaml for every option and README.md for more.
"""

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

# Run folders and caches live under the project folder, wherever the command is launched from.
os.environ.setdefault("TINYLM_ROOT", str(Path(__file__).resolve().parent))


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from tinylm.training import main as train_main

    return train_main(cfg)


if __name__ == "__main__":
    if "ckpt_path=last" in sys.argv:  # resume the newest run, in its own folder
        from tinylm.resume import resolve_resume_argv

        sys.argv = resolve_resume_argv(sys.argv, Path(os.environ["TINYLM_ROOT"]) / "outputs")
    main()
