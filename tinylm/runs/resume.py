"""Resuming a run: from its own saved config, in its own folder, and only after every check.

``python train.py ckpt_path=last`` (or ``ckpt_path=<a run's checkpoint>``) continues that run:

- ``plan_resume`` runs before Hydra starts. It finds the checkpoint (``last``: the newest
  last checkpoint under ``paths.log_dir``, resolved as Hydra resolves the config) and rebuilds the
  command line from the run's own record: its record's ``overrides.yaml``, then each earlier resume's
  changes (its record's ``resumes.yaml``). On top of that only ``RESUMABLE`` settings may change; the
  model, the data and the seed stay the run's. Hydra is told to write nothing into the run folder.
- ``check_resume`` (inside the job, before anything is written) refuses a checkpoint that is
  unreadable, or made for another model or another text than the config gives.
- ``record_resume`` appends this resume's changes to its record's ``resumes.yaml`` once every check has
  passed, so the run keeps its original ``config.yaml`` and ``overrides.yaml`` and a history.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import fields
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException

from tinylm.checkpoint import model_parts, read_checkpoint, refusing_invalid
from tinylm.cli import quote_values
from tinylm.errors import TinyLMError
from tinylm.models import config_class, model_class
from tinylm.run_folder import CHECKPOINTS_DIR, HYDRA_DIR, find_checkpoint, latest_last_checkpoint, read_record
from tinylm.runs.folder import check_overrides, composed_log_dir, original_overrides

# settings a resume may change; everything else (model shape, data, seed, ...) is the run's own
RESUMABLE = ("trainer", "optim", "callbacks", "logger", "threads", "compile", "model.dropout", "model.attn_impl")
LOCATORS = ("paths",)  # say where to look for `last`; never applied to the resumed run
RESUMES_FILE = "resumes.yaml"


def _key(override: Override) -> str:
    return override.key_or_group + (f"@{override.package}" if override.package else "")


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") or key.startswith(p + "/") for p in prefixes)


def _parse(overrides: list[str]) -> list[Override]:
    return OverridesParser.create().parse_overrides(overrides)


def merge_overrides(overrides: list[str]) -> list[str]:
    """Keep the last override of each key, in the order the keys were last given."""
    merged: dict[str, str] = {}
    for override in _parse(overrides):
        merged.pop(_key(override), None)
        merged[_key(override)] = override.input_line
    return list(merged.values())


def resume_entries(record: Path) -> list[dict]:
    """The entries of a run's recorded ``resumes.yaml`` (none if absent); a TinyLMError naming it and the fix
    when it cannot be read."""
    if not record.exists():
        return []
    try:
        entries = read_record(record) or []
        if not isinstance(entries, list):
            raise ValueError("not a list of resumes")
        for number, entry in enumerate(entries, start=1):
            if not isinstance(entry, dict):
                raise ValueError(f"entry {number} is not a resume (time, checkpoint, from_step, overrides)")
            check_overrides(entry.setdefault("overrides", []))
    except ValueError as e:
        raise TinyLMError(
            f"cannot read {record}: {e}; it records what the run's earlier resumes changed: restore it, or delete "
            f"it to resume with the run's own settings (its {HYDRA_DIR}/overrides.yaml) and this command's changes only"
        ) from None
    return entries


def saved_overrides(run_dir: Path) -> list[str] | None:
    """The run's own overrides: its original command line, then each resume's changes (None: no record);
    a TinyLMError naming the file and the fix when its record cannot be read."""
    overrides = original_overrides(run_dir)
    if overrides is None:
        return None
    for entry in resume_entries(run_dir / HYDRA_DIR / RESUMES_FILE):
        overrides += entry["overrides"]
    try:
        return merge_overrides(overrides)
    except HydraException as e:
        raise TinyLMError(
            f"the record of run {run_dir} ({HYDRA_DIR}/overrides.yaml, {HYDRA_DIR}/{RESUMES_FILE}) holds an override "
            f"Hydra cannot read ({str(e).splitlines()[0]}): restore those files"
        ) from None


def plan_resume(argv: list[str], conf_dir: Path) -> list[str]:
    """Rewrite a resuming command line so that the run continues as it was configured.

    Returns ``argv`` unchanged when it does not resume, or in a sweep (``-m``); raises a
    TinyLMError when it asks to change a setting the run must keep.
    """
    flags = [a for a in argv[1:] if a.startswith("-")]
    if any(flag in ("-m", "--multirun") for flag in flags):
        return argv
    try:
        parsed = _parse([a for a in argv[1:] if not a.startswith("-")])
    except HydraException:
        return argv  # Hydra reports the bad override itself
    ckpt = [o for o in parsed if _key(o) == "ckpt_path"]
    if not ckpt or ckpt[-1].value() in (None, ""):
        return argv
    hydra_args = [o for o in parsed if _under(_key(o), ("hydra",))]
    task = [o for o in parsed if o not in hydra_args and _key(o) != "ckpt_path"]
    last = {_key(o): i for i, o in enumerate(task)}  # a key given twice: Hydra applies its last value, so do we
    task = [o for i, o in enumerate(task) if last[_key(o)] == i]

    value, why = str(ckpt[-1].value()), ""
    if value == "last":
        log_dir = composed_log_dir(conf_dir, [o.input_line for o in task if _under(_key(o), LOCATORS)])
        path, why = latest_last_checkpoint(log_dir)
    else:
        path = Path(os.path.abspath(os.path.expanduser(value)))
    run_dir = path.parent.parent
    saved = saved_overrides(run_dir) if path.is_file() and path.parent.name == CHECKPOINTS_DIR else None
    new_ckpt = quote_values([f"ckpt_path={path}"], ("ckpt_path",))
    if saved is None:  # a loose checkpoint file: the command line says what to train
        return [argv[0], *flags, *(o.input_line for o in hydra_args + task), *new_ckpt]

    own = {_key(o): o for o in _parse(saved)}
    changes, refused = [], []
    for override in task:
        key = _key(override)
        same = key in own and (own[key].type, own[key].value()) == (override.type, override.value())
        if _under(key, LOCATORS) or same:
            continue
        (changes if _under(key, RESUMABLE) else refused).append(override.input_line)
    if refused:
        raise TinyLMError(
            f"cannot change {', '.join(refused)} when resuming {run_dir}: a resumed run keeps its own model, "
            f"data and seed (see its {HYDRA_DIR}/overrides.yaml); a resume may change only trainer.*, optim.*, "
            "callbacks, logger, threads, compile and model.dropout/attn_impl. For other settings start a new "
            "run without ckpt_path"
        )
    run_dirs = [o for o in hydra_args if _key(o) == "hydra.run.dir"]
    in_place = not run_dirs or Path(os.path.abspath(str(run_dirs[-1].value()))) == run_dir
    hydra_lines = [o.input_line for o in hydra_args]
    if not run_dirs:
        hydra_lines += quote_values([f"hydra.run.dir={run_dir}"], ("hydra.run.dir",))
    if in_place:
        hydra_lines.append("hydra.output_subdir=null")  # the run's Hydra record stays as it is
    where = "in its own folder" if in_place else f"into {run_dirs[-1].value()}"
    print(f"resuming run {run_dir} from {path.name} {where}{f' ({why})' if why else ''}\n"
          f"  its settings: {' '.join(saved) or '(the defaults)'}\n"
          f"  changed now:  {' '.join(changes) or '(nothing)'}", flush=True)
    return [argv[0], *flags, *hydra_lines, *merge_overrides(saved + changes), *new_ckpt]


def shape_keys(*model_configs: dict) -> list[str]:
    """The settings the weights of these configs' model classes depend on (``ModelConfig.shape_keys``);
    a key a class lacks reads as None. A config whose class cannot be named adds none."""
    keys = ["arch"]
    for config in model_configs:
        try:
            keys += config_class(model_class(config, imports=False)).shape_keys()
        except ValueError:  # the check that follows names what does not fit
            pass
    return list(dict.fromkeys(keys))


def with_options(config: dict) -> dict:
    """``config`` with the options its class records only when set (``ModelConfig.option_keys``) at their
    defaults where it leaves them out: a checkpoint's config and a run's compare alike."""
    try:
        cls = config_class(model_class(config, imports=False))
    except ValueError:  # the check that follows names what does not fit
        return config
    return {**{f.name: f.default for f in fields(cls) if f.name in cls.option_keys}, **config}


def check_resume(path: str | Path, model_config: dict, tokenizer_state: dict, data: dict | None = None) -> int:
    """The checkpoint's step; a one-line TinyLMError unless ``path`` can continue this training: the model and
    the vocabulary this config gives, weights that are what the checkpoint's own config describes.

    It reads the checkpoint alone, so the run calls it before building its model: a checkpoint asking for a
    model it cannot be (weights of other shapes, or fewer numbers than their shapes say) costs no model.
    ``model_config``: the run's ``model.*`` with the data's ``vocab_size``, as the config gives it or as a
    checkpoint records it (``tinylm.models.model_config``).
    ``data``: the data module's ``identity`` (token count, hash of the ids). Where the checkpoint
    records another text of the same vocabulary (an edited file), one warning says that the
    validation split and the windows differ; a checkpoint that records none is not compared.
    """
    checkpoint = read_checkpoint(find_checkpoint(ckpt_path=path))
    saved = {"arch": "gpt", **checkpoint["model_config"]}  # release 0.1 wrote no arch for a GPT
    theirs, own = with_options(saved), with_options(model_config)
    different = [f"{k}={theirs.get(k)!r} (config: {own.get(k)!r})"
                 for k in shape_keys(model_config, saved) if theirs.get(k) != own.get(k)]
    if different:
        raise TinyLMError(
            f"checkpoint {path} was trained with a different model: {', '.join(different)}; "
            "use the same model.* settings to resume, or start a new run without ckpt_path"
        )
    if checkpoint["tokenizer"] != tokenizer_state or saved.get("vocab_size") != model_config.get("vocab_size"):
        kind = checkpoint["tokenizer"].get("kind") if isinstance(checkpoint["tokenizer"], dict) else "?"
        raise TinyLMError(
            f"checkpoint {path} was trained on different data: its vocabulary ({kind}, "
            f"{saved.get('vocab_size')} symbols) differs from the one data.path and data.tokenizer give now "
            f"({tokenizer_state['kind']}, {model_config.get('vocab_size')} symbols); resume with the run's own "
            "text and data.tokenizer, or start a new run without ckpt_path"
        )
    with refusing_invalid(path):  # its weights are what its config, so the run's, describes (tinylm.models.sizes)
        model_parts(checkpoint)
    trained_on = checkpoint.get("data")  # absent from checkpoints before the data had an identity
    if isinstance(trained_on, dict) and data is not None and trained_on.get("sha256") != data["sha256"]:
        logging.getLogger(__name__).warning(
            "the data is not the text checkpoint %s was trained on (%s tokens now, %s then; the same vocabulary): "
            "the validation split and the training windows differ from the checkpoint's data, so loss/val before and "
            "after this resume are not comparable; resume with the run's own data.path to continue it exactly",
            path, data["tokens"], trained_on.get("tokens"))
    return int(checkpoint.get("global_step", 0))


def record_resume(run_dir: Path, checkpoint: Path, step: int, task_overrides: list[str]) -> None:
    """Append this resume (its checkpoint, step and changed settings) to its record's ``resumes.yaml``."""
    own = set(saved_overrides(run_dir) or [])
    changes = [o for o in task_overrides if o not in own and not o.startswith("ckpt_path=")]
    record = run_dir / HYDRA_DIR / RESUMES_FILE
    record.parent.mkdir(parents=True, exist_ok=True)
    entries = resume_entries(record)
    entries.append({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "checkpoint": str(checkpoint),
                    "from_step": step, "overrides": changes})
    tmp = record.with_name(record.name + ".tmp")
    tmp.write_text(yaml.safe_dump(entries, allow_unicode=True, sort_keys=False), encoding="utf-8")
    os.replace(tmp, record)
