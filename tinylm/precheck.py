"""The command line, checked before Hydra runs a command: an override Hydra cannot apply is one line.

Hydra answers a misspelled key (``model.num_layer=6``) or a config that is not in a group
(``model=transformer``) with 6-10 lines, and for a key its hint is ``+model.num_layer=6``, which
adds the typo to the config. ``composed`` composes the command's config first, as the command will,
and turns each such override into one line: the key with the keys that are there (a close one
suggested: "did you mean model.num_layers?"), the group option with the options there are. A key the
config has not but what receives its group takes (``trainer.limit_val_batches``, a Trainer argument:
``config_keys.ADDED_WITH_PLUS``) is one line saying to add it with ``+``. Every bad override is said at
once: an override Hydra refused is left out and the rest composed again.

It runs before Hydra creates anything and imports neither torch nor Lightning. A command line with
Hydra's own flags (``--help``, ``--cfg job``, ``-cd DIR``, ...) is left to Hydra. In a sweep (``-m``)
the first job's config is composed (the first value of each list or range), and each config a
group sweep names must exist; so in a config that asks for a sweep itself (``hparams_search=optuna``).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException, MissingConfigException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from tinylm.errors import TinyLMError
from tinylm.training.config_keys import ADDED_WITH_PLUS, SET_BY_TRAIN, unknown_key_lines

MULTIRUN = ("-m", "--multirun")
CHOICE_SWEEPS = ("CHOICE_SWEEP", "SIMPLE_CHOICE_SWEEP", "RANGE_SWEEP")  # those whose values can be listed
KEY_ERRORS = (ConfigKeyError, ConfigAttributeError)  # OmegaConf's for a key the config has not
MAX_PROBLEMS = 10  # composing again after each refused override: at most this many are said


def joined_lines(text: str) -> str:
    """Hydra's message of several lines as one (its list of search paths left out)."""
    text = text.split("\nConfig search path:")[0]
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _listed(override: Override) -> bool:
    """Whether ``override`` is a sweep whose values can be listed (``a,b``, ``range(...)``)."""
    return override.is_sweep_override() and override.value_type.name in CHOICE_SWEEPS


def _first_job(override: Override) -> str:
    """A swept override as the sweep's first job has it: ``model.n_embd=32,64`` -> ``model.n_embd=32``."""
    first = next(iter(override.sweep_string_iterator()))
    return f"{override.get_key_element()}={first}"


def is_multirun(cfg: DictConfig) -> bool:
    """Whether the composed config itself asks for a sweep (``hydra.mode: MULTIRUN``, as hparams_search=optuna does)."""
    return OmegaConf.select(cfg, "hydra.mode") == RunMode.MULTIRUN


def _multirun_by_config(config_name: str, parsed: list[Override]) -> bool:
    """Whether sweep overrides without ``-m`` are a sweep all the same: the config asks for one."""
    if not any(o.is_sweep_override() for o in parsed):
        return False
    fixed = [o for o in parsed if not o.is_sweep_override()]
    picks = [o for o in fixed if "." not in o.key_or_group or o.is_hydra_override()]  # groups, hydra.mode
    for overrides in (fixed, picks):  # the picks alone when a misspelled key is among the others
        try:
            return is_multirun(compose(config_name, overrides=[o.input_line for o in overrides],
                                       return_hydra_config=True))
        except HydraException:  # said when the command line is composed
            continue
    return False


def _group_options(group: str) -> list[str]:
    return GlobalHydra.instance().config_loader().get_group_options(group, results_filter=ObjectType.CONFIG)


def _sweep_problems(overrides: list[Override]) -> list[str]:
    """Each value of a group sweep (``model=gpt,transformer``) that names no config of the group."""
    problems = []
    for override in overrides:
        group = override.key_or_group
        if not _listed(override):
            continue
        options = _group_options(group)
        if not options:  # a key, not a group
            continue
        problems += [_missing_option(group, str(value), options) for value in override.sweep_string_iterator()
                     if str(value) not in options]
    return problems


def _missing_option(group: str, name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    hint = f"did you mean {group}={close[0]}? " if close else ""
    return f"{group}={name} is not a config of conf/{group}/: {hint}choose one of {', '.join(options)}"


def _unknown_line(full_key: str, parent: DictConfig, config_name: str, choices: dict,
                  override: str | None = None) -> str:
    """The line for a key ``parent`` has not: to add it with ``+`` when what receives it takes it (``override``:
    the command line's ``key=value`` that set it), else the keys it has, a close one suggested."""
    where, _, key = full_key.rpartition(".")
    known = [str(k) for k in parent if k != "hydra" and not str(k).startswith("_")]
    addable, taker = ADDED_WITH_PLUS.get(where, ((), "")) if config_name == "train" else ((), "")
    addable = [k for k in addable if k not in known]
    if key in addable:
        added = override if override and override.startswith((f"{full_key}=", f"{full_key}.")) else f"{full_key}=VALUE"
        return f"{full_key} is not in conf/{where}: add it with +{added} ({taker})"
    command = "the training config" if config_name == "train" else f"the {config_name}.py config"
    owner = (f"{where}={choices[where]}" if choices.get(where) else where) if where else \
        f"{command} (conf/{config_name}.yaml)"
    set_by = SET_BY_TRAIN if config_name == "train" else {}
    return unknown_key_lines(where, [key], known, owner, "has", set_by, addable)[full_key]


def _missing_key(key: str, cfg: DictConfig) -> tuple[str, DictConfig] | None:
    """(the first part of ``key`` that ``cfg`` has not, the node that lacks it); None if it has the key."""
    node, parts = cfg, key.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            return None  # a key below a value: Hydra's to say
        if part not in node:
            return ".".join(parts[: i + 1]), node
        node = OmegaConf.select(node, part, throw_on_resolution_failure=False)
    return None


def _why(error: HydraException, override: str | None, config_name: str, choices: dict, given: str | None) -> str:
    """One line for an override Hydra could not apply (``choices``: the config groups' picks, when known;
    ``given``: the override as the command line has it, a sweep's whole)."""
    cause = error.__cause__
    if isinstance(error, MissingConfigException) and error.options is not None and error.missing_cfg_file:
        group, _, name = error.missing_cfg_file.rpartition("/")
        return _missing_option(group, name, error.options)
    if isinstance(cause, KEY_ERRORS) and isinstance(cause.parent_node, DictConfig) and cause.full_key:
        return _unknown_line(str(cause.full_key), cause.parent_node, config_name, choices, given)
    return f"{override + ': ' if override else ''}{joined_lines(str(error))}"


def _unreadable(override: str, error: HydraException, cfg: DictConfig | None, config_name: str) -> str:
    """One line for an override Hydra cannot parse: its key, if the config has no such key (a misspelled key's
    value is not quoted for Hydra), else how to quote the value."""
    key, eq, value = override.partition("=")
    key = key.lstrip("+~")
    missing = _missing_key(key, cfg) if eq and cfg is not None and key else None
    quotable = eq and "'" not in value
    if missing is not None:
        return _unknown_line(*missing, config_name, dict(cfg.hydra.runtime.choices),
                             f"{key}='{value}'" if quotable else None)
    quoted = f": quote the value, {key}='{value}'" if quotable else ""
    return f"cannot read {override} ({joined_lines(str(error))}){quoted}"


def _culprit(error: HydraException, overrides: list[str]) -> str | None:
    """Which of ``overrides`` Hydra refused (the last one naming the key or file it names), if it can tell."""
    cause = error.__cause__
    if isinstance(error, MissingConfigException) and error.missing_cfg_file:
        named = error.missing_cfg_file
    elif isinstance(cause, KEY_ERRORS) and cause.full_key:
        named = str(cause.full_key)
    else:
        return None
    for override in reversed(overrides):
        key, _, value = override.lstrip("+~").partition("=")
        key = key.split("@")[0]
        if named in (f"{key}/{value}", key) or key.startswith(named + ".") or key.startswith(named + "/"):
            return override
    return None


def composed(config_name: str, argv: list[str], conf_dir: Path) -> DictConfig | None:
    """The config ``argv``'s overrides compose (Hydra's node included, nothing resolved); one TinyLMError
    saying every override Hydra could not apply. None when Hydra's own flags ask for something else."""
    args = argv[1:]
    if any(arg.startswith("-") and arg not in MULTIRUN for arg in args):
        return None
    overrides = [arg for arg in args if arg not in MULTIRUN]
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        parser, parsed, unreadable = OverridesParser.create(), [], {}
        for override in overrides:
            try:
                parsed += parser.parse_overrides([override])
            except HydraException as e:
                unreadable[override] = e
        sweeps = bool(set(MULTIRUN) & set(args)) or _multirun_by_config(config_name, parsed)
        problems = _sweep_problems(parsed) if sweeps else []
        # a sweep's first job; a sweep the sweeper draws from (interval, glob) is the sweeper's
        kept = [o for o in parsed if not (sweeps and o.is_sweep_override() and not _listed(o))]
        overrides = [_first_job(o) if sweeps and _listed(o) else o.input_line for o in kept]
        given = dict(zip(overrides, [o.input_line for o in kept], strict=True))  # each as the command line has it
        refused: list[tuple[HydraException, str | None]] = []
        cfg = None
        while len(refused) < MAX_PROBLEMS:
            try:
                cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
                break
            except HydraException as e:
                refused.append((e, _culprit(e, overrides)))
                if refused[-1][1] is None:
                    break
                overrides.remove(refused[-1][1])
    choices = dict(cfg.hydra.runtime.choices) if cfg is not None else {}
    problems += [_why(error, override, config_name, choices, given.get(override)) for error, override in refused]
    problems += [_unreadable(override, error, cfg, config_name) for override, error in unreadable.items()]
    if problems:
        raise TinyLMError("; ".join(dict.fromkeys(problems)))
    return cfg
