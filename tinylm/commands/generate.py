"""Sample text from a trained tinylm checkpoint, streaming it to stdout as it is produced:

    python generate.py prompt="我正在学习" max_new_tokens=200        # newest run's best checkpoint
    python generate.py run_dir=outputs/runs/<time> temperature=0.8 top_k=20 num_samples=3
    python generate.py ckpt_path=path/to/model.ckpt prompt_file=start.txt seed=1 stop="\\n"
    python generate.py ckpt_path=model.onnx prompt="我正在学习"       # exported by export.py
    python generate.py ckpt_path=numbers.ckpt prompt="三千零五"        # a translation model: 3005
    python generate.py ckpt_path=numbers.ckpt prompt_file=sources.txt beam_size=4  # one line out per line in

See conf/generate.yaml for every option. The checkpoint used and the seed go to stderr. Only
torch, Hydra and tinylm's model/sampling code are imported: no Lightning, so it starts fast. An
ONNX file (a ckpt_path ending in .onnx) runs on ONNX Runtime and numpy, and torch is never
imported: the same options and output, and with temperature=0 the same text as its checkpoint
(random draws come from numpy, so a seed gives other samples than the checkpoint does).

What a checkpoint prints is its task's (``tinylm.tasks``, ``Task.generate``). A translation checkpoint
gives translations: each line of the prompt (or of prompt_file) is one source, and stdout has exactly one
translation per line, in order (an empty line for an empty one). That is any model trained on
``data=pairs``: the encoder-decoder (``model=seq2seq``), or a decoder-only GPT or RNN
(``model=gpt data=pairs``), which continues source + BEGIN up to END.
"""

import secrets
from functools import partial
from pathlib import Path

import hydra
from omegaconf import DictConfig

from tinylm.cli import run_command
from tinylm.commands import checkpoint_from_config, launch
from tinylm.commands.options import GENERATE
from tinylm.console import Sampler, print_samples, unescape
from tinylm.errors import TinyLMError
from tinylm.run_folder import CONF_DIR
from tinylm.tasks import get_task
from tinylm.textfile import as_lines, read_capped_bytes
from tinylm.values import check_options

TEXT_KEYS = ("prompt", "stop")  # free text on the command line, taken literally (\n, \t unescaped)
PATH_KEYS = ("ckpt_path", "run_dir", "prompt_file", "paths.log_dir")  # quoted, never unescaped
def read_prompt(cfg: DictConfig) -> str:
    if cfg.prompt_file and cfg.prompt:
        raise TinyLMError("both prompt and prompt_file are set: pass only one of them")
    if not cfg.prompt_file:
        return unescape("" if cfg.prompt is None else str(cfg.prompt))
    path = Path(hydra.utils.to_absolute_path(str(cfg.prompt_file)))
    data = read_capped_bytes(path, "prompt_file", cfg.prompt_max_mib, "prompt_max_mib")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TinyLMError(f"prompt_file {path} cannot be read as UTF-8 text ({e})") from None
    return as_lines(text)[0]  # as training reads its text


def is_onnx(cfg: DictConfig) -> bool:
    return bool(cfg.ckpt_path) and not cfg.run_dir and str(cfg.ckpt_path).lower().endswith(".onnx")


def onnx_sampler(cfg: DictConfig, seed: int) -> Sampler:
    """An exported model on ONNX Runtime: numpy and onnxruntime, never torch."""
    import numpy as np

    from tinylm.onnx.runtime import load_onnx, stream_text

    model = load_onnx(hydra.utils.to_absolute_path(str(cfg.ckpt_path)), cfg.threads)
    stream = partial(stream_text, model, model.tokenizer, generator=np.random.default_rng(seed),
                     use_cache=cfg.use_cache)
    return Sampler(model.path, model.tokenizer, model.global_step, model.num_params, stream)


def load_checkpoint(cfg: DictConfig):
    """The checkpoint's model and tokenizer on PyTorch (``tinylm.tasks.base.LoadedModel``); torch is imported
    once there is a checkpoint to load."""
    chosen = checkpoint_from_config(cfg)  # the file, and why it (for the line naming it)
    import torch

    from tinylm.checkpoint import load_model

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    return load_model(*chosen)


def run(cfg: DictConfig) -> None:
    check_options(cfg, GENERATE)  # before the checkpoint is even looked for
    prompt = read_prompt(cfg)
    seed = secrets.randbelow(2**31) if cfg.seed is None else cfg.seed
    if is_onnx(cfg):  # an ONNX file continues text
        if cfg.ablate:
            raise TinyLMError("ablate= switches heads off in a PyTorch checkpoint: pass its .ckpt, not the .onnx file")
        print_samples(cfg, onnx_sampler(cfg, seed), prompt, seed)
        return
    loaded = load_checkpoint(cfg)
    from tinylm.analysis.hooks import heads_switched_off  # torch: only here, never for an ONNX file

    with heads_switched_off(loaded.model, cfg.ablate):  # ablate=[layer.head, ...]: those heads zeroed
        get_task(loaded.task).generate(cfg, loaded, prompt, seed)  # text: continuations; translation: translations


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="generate")
def main(cfg: DictConfig) -> None:
    run_command(run, cfg)


def run_command_line() -> None:
    launch(main, "generate", TEXT_KEYS, PATH_KEYS)
