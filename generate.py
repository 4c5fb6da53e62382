"""Sample text from a trained tinylm checkpoint, streaming it to stdout as it is produced:

    python generate.py prompt="我正在学习" max_new_tokens=200        # newest run's best checkpoint
    python generate.py run_dir=outputs/runs/<time> temperature=0.8 top_k=20 num_samples=3
    python generate.py ckpt_path=path/to/last.ckpt prompt_file=start.txt seed=1 stop="\\n"

See conf/generate.yaml for every option. The checkpoint used and the seed go to stderr. Only
torch, Hydra and tinylm's model/sampling code are imported: no Lightning, so it starts fast.
"""

import os
import re
import secrets
import sys
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig

from tinylm.checkpoint import find_checkpoint, load_model
from tinylm.errors import TinyLMError
from tinylm.generation import check_sampling, encode_prompt, stream_text

# Run folders live under the project folder, wherever the command is launched from.
os.environ.setdefault("TINYLM_ROOT", str(Path(__file__).resolve().parent))

TEXT_KEYS = ("prompt", "stop")  # free text on the command line, never Hydra syntax
ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}
SEPARATOR = "\n---\n"


def quote_text_overrides(argv: list[str], keys: tuple[str, ...] = TEXT_KEYS) -> list[str]:
    """Quote ``prompt=...`` and ``stop=...`` (or other ``keys``) so Hydra takes any text literally.

    Hydra's override grammar rejects unquoted non-ASCII values, so ``prompt=我正在学习`` (what
    the shell passes for prompt="我正在学习") would fail; already quoted values are left alone.
    Inside Hydra quotes only a quote, and backslashes right before one, need escaping.
    """
    quoted = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        if eq and key in keys and value and value[0] not in "'\"":
            value = re.sub(r"(\\*)(')", r"\1\1\\\2", value)  # \' -> \\\'  and ' -> \'
            value = re.sub(r"(\\+)$", r"\1\1", value)  # a final backslash must not eat the quote
            arg = f"{key}='{value}'"
        quoted.append(arg)
    return quoted


def unescape(text: str) -> str:
    """Turn the two-character sequences \\n, \\t and \\\\ into newline, tab and backslash."""
    return re.sub(r"\\([nt\\])", lambda m: ESCAPES[m.group(1)], text)


def read_prompt(cfg: DictConfig) -> str:
    if cfg.prompt_file and cfg.prompt:
        raise TinyLMError("both prompt and prompt_file are set: pass only one of them")
    if not cfg.prompt_file:
        return unescape("" if cfg.prompt is None else str(cfg.prompt))
    path = Path(hydra.utils.to_absolute_path(str(cfg.prompt_file)))
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TinyLMError(f"prompt_file {path} does not exist: check the path") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TinyLMError(f"prompt_file {path} cannot be read as UTF-8 text ({e})") from None


def check_options(cfg: DictConfig) -> None:
    """Reject bad values before the checkpoint is even looked for."""
    check_sampling(cfg.temperature, cfg.top_k, cfg.top_p, cfg.max_new_tokens, cfg.num_samples)
    if cfg.seed is not None and type(cfg.seed) is not int:
        raise TinyLMError(f"seed={cfg.seed!r} must be an integer, or null for a fresh one")
    if cfg.threads is not None and (type(cfg.threads) is not int or cfg.threads < 1):
        raise TinyLMError(f"threads={cfg.threads!r} must be an integer >= 1, or null")


def run(cfg: DictConfig) -> None:
    check_options(cfg)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    prompt = read_prompt(cfg)
    path = find_checkpoint(
        hydra.utils.to_absolute_path(cfg.ckpt_path) if cfg.ckpt_path else None,
        hydra.utils.to_absolute_path(cfg.run_dir) if cfg.run_dir else None,
        cfg.paths.log_dir,
    )
    loaded = load_model(path)
    prompt_ids = encode_prompt(loaded.tokenizer, prompt, cfg.unknown)
    seed = secrets.randbelow(2**31) if cfg.seed is None else cfg.seed
    print(f"checkpoint: {path} (step {loaded.global_step}, vocabulary {loaded.tokenizer.vocab_size}"
          f", {loaded.model.num_params():,} parameters); seed={seed}", file=sys.stderr)

    generator = torch.Generator().manual_seed(seed)
    stop = unescape(str(cfg.stop)) if cfg.stop not in (None, "") else None
    shown_prompt = loaded.tokenizer.decode(prompt_ids) if prompt else ""
    for i in range(cfg.num_samples):
        sys.stdout.write((SEPARATOR if i else "") + shown_prompt)
        for piece in stream_text(
            loaded.model, loaded.tokenizer, prompt_ids, cfg.max_new_tokens, stop=stop,
            temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
            generator=generator, use_cache=cfg.use_cache,
        ):
            sys.stdout.write(piece)
            sys.stdout.flush()
    sys.stdout.write("\n")


@hydra.main(version_base="1.3", config_path="conf", config_name="generate")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except TinyLMError as e:
        raise SystemExit(f"error: {e}") from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    sys.argv = quote_text_overrides(sys.argv)
    main()
