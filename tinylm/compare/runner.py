"""Training the variants of a comparison, one train.py process each, reusing every finished run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf

from tinylm.cli import TRAIN_PATH_KEYS, quote_values
from tinylm.compare.spec import Comparison
from tinylm.errors import TinyLMError
from tinylm.runs.folder import original_overrides

ROOT = Path(__file__).resolve().parents[2]
TRAIN_SCRIPT = ROOT / "train.py"


def finished(run_dir: Path, overrides: list[str]) -> bool:
    """True when ``run_dir`` holds a completed run with exactly these overrides.

    A folder with a run of other settings, or that is no run folder, is refused rather than
    silently mixed into the report (or deleted).
    """
    if not run_dir.exists():
        return False
    saved = original_overrides(run_dir)
    if saved is None:
        raise TinyLMError(f"{run_dir} is not a run folder (no .hydra/overrides.yaml): move it, or use another --out")
    if saved != overrides:
        raise TinyLMError(
            f"{run_dir} holds a run with other settings ({' '.join(saved)}): "
            "pass --rerun to replace it, or another --out"
        )
    metrics = run_dir / "metrics.json"
    return metrics.exists() and not json.loads(metrics.read_text()).get("interrupted")


def without_paths(config: dict) -> dict:
    return {key: value for key, value in config.items() if key != "paths"}  # where a run is, not what


def training_config(overrides: list[str]) -> dict:
    """The train config these overrides compose to, as a run saves it (.hydra/config.yaml)."""
    try:
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return without_paths(OmegaConf.to_container(compose("train", overrides=overrides)))
    except HydraException as e:
        reason = " ".join(str(e).split())
        raise TinyLMError(f"the train.py overrides do not fit the config ({reason}): check their names") from None


def same_run_elsewhere(out: Path, config: dict) -> Path | None:
    """A finished run in any comparison folder under ``out`` trained with exactly ``config``."""
    for candidate in sorted(out.glob("*/*/.hydra/config.yaml")):
        run_dir = candidate.parent.parent
        done = (run_dir / "metrics.json").exists() and not json.loads((run_dir / "metrics.json").read_text()).get(
            "interrupted")
        if done and without_paths(OmegaConf.to_container(OmegaConf.load(candidate))) == config:
            return run_dir
    return None


def copy_run(source: Path, run_dir: Path, overrides: list[str]) -> None:
    """Reuse ``source`` (same config) as ``run_dir``, recording the overrides this variant asked for."""
    shutil.copytree(source, run_dir)
    OmegaConf.save(OmegaConf.create(overrides), run_dir / ".hydra" / "overrides.yaml")


def train(run_dir: Path, overrides: list[str]) -> str | None:
    """Run ``train.py`` into ``run_dir``; None on success, else its error line."""
    cmd = [sys.executable, str(TRAIN_SCRIPT), f"hydra.run.dir={run_dir}", *overrides]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or [f"exit code {proc.returncode}"])[-1]


def run_comparison(name: str, comparison: Comparison, out: Path, common: list[str], rerun: bool) -> list[str]:
    """Train every variant not already done; return the error lines of the ones that failed."""
    failures = []
    for variant, own in comparison.variants.items():
        run_dir = out / name / variant
        overrides = quote_values([*common, *own], TRAIN_PATH_KEYS)  # as train.py records them
        if rerun and run_dir.exists():
            shutil.rmtree(run_dir)
        if finished(run_dir, overrides):
            print(f"{name}/{variant}: already run, reading it", flush=True)
            continue
        if run_dir.exists():  # an unfinished run of the same settings: start it afresh, no mixed logs
            shutil.rmtree(run_dir)
        twin = same_run_elsewhere(out, training_config(overrides))
        if twin is not None:
            copy_run(twin, run_dir, overrides)
            print(f"{name}/{variant}: the same training config as {twin.parent.name}/{twin.name}, copied", flush=True)
            continue
        print(f"{name}/{variant}: training ({' '.join(own) or 'reference settings'})", flush=True)
        error = train(run_dir, overrides)
        if error:
            print(f"{name}/{variant}: failed: {error}", file=sys.stderr, flush=True)
            failures.append(f"{name}/{variant}: {error}")
    return failures
