"""Export a trained checkpoint to one ONNX file that generates without PyTorch, or to a folder for other tools:

    python export.py                                      # newest run's best checkpoint, .onnx next to it
    python export.py ckpt_path=path/to/model.ckpt out=model.onnx
    python export.py run_dir=outputs/runs/<time>
    python generate.py ckpt_path=model.onnx prompt="我正在学习"   # ONNX Runtime and numpy only
    python export.py format=transformer_lens out=tl_model  # tinylm.load_transformer_lens("tl_model")
    python export.py format=huggingface out=my_model        # tinylm.load("my_model"), push_to_hub, ...

The file holds the weights, the model config and the tokenizer (as JSON metadata): nothing else is
needed to sample from it. The graph is one decoding step with the keys and values of earlier
positions in and out (tinylm/onnx/export.py). The file is checked with onnx.checker and its
logits compared with PyTorch's before the command reports success. Each phase (loading, tracing,
checking) is one line on stderr as it starts; the result goes to stdout. See conf/export.yaml.

``format=transformer_lens`` writes a TransformerLens model's folder (``tinylm.interop.transformer_lens``), read
back and compared with the checkpoint's logits before success is reported; ``format=huggingface`` the folder
``lm.save_pretrained`` writes (``tinylm.interop.saved``), which every command reads as a checkpoint.
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from tinylm.cli import run_command
from tinylm.commands import checkpoint_from_config, launch
from tinylm.console import checkpoint_name, shown_path
from tinylm.errors import TinyLMError
from tinylm.run_folder import CONF_DIR
from tinylm.tasks import get_task
from tinylm.textfile import read_json
from tinylm.values import check_value, choice

PATH_KEYS = ("ckpt_path", "run_dir", "out", "paths.log_dir")
FORMATS = {"onnx": "one .onnx file that samples without PyTorch",
           "transformer_lens": "a TransformerLens HookedTransformer's folder",
           "huggingface": "the folder lm.save_pretrained writes"}
FOLDER_SUFFIX = {"transformer_lens": "-transformer_lens", "huggingface": "-hf"}  # out=null: beside the checkpoint


def output_path(cfg: DictConfig) -> Path | None:
    """``out`` as an absolute path (None: next to the checkpoint), refused in one line if unusable."""
    check_value("format", cfg.format, choice(FORMATS))
    if cfg.ckpt_path and str(cfg.ckpt_path).lower().endswith(".onnx"):
        raise TinyLMError(f"ckpt_path={cfg.ckpt_path} is an ONNX file already: pass the .ckpt checkpoint "
                          "it was exported from")
    if cfg.format != "onnx":
        return output_folder(cfg)
    if not cfg.out:
        return None
    out = Path(hydra.utils.to_absolute_path(str(cfg.out)))
    if out.suffix.lower() != ".onnx":
        raise TinyLMError(f"out={cfg.out} must end in .onnx: generate.py reads a file as ONNX by that name")
    if out.is_dir():
        raise TinyLMError(f"out={cfg.out} is a directory: name the file to write, e.g. out={cfg.out}/model.onnx")
    return out


def output_folder(cfg: DictConfig) -> Path | None:
    """``out`` of a folder format as an absolute path: a folder that is new, empty or holds only such an export."""
    if not cfg.out:
        return None
    out = Path(hydra.utils.to_absolute_path(str(cfg.out)))
    if out.exists() and not out.is_dir():
        raise TinyLMError(f"out={cfg.out} is a file, and format={cfg.format} writes a folder: name a new folder")
    if out.is_dir() and any(out.iterdir()) and not earlier_export(out, cfg.format):
        raise TinyLMError(f"out={cfg.out} is a folder that holds other files: name a new or empty folder "
                          f"(an earlier format={cfg.format} export there is replaced)")
    return out


def earlier_export(folder: Path, format: str) -> bool:
    """Whether ``folder`` holds an export of ``format`` that tinylm wrote (its config.json says so)."""
    try:
        config = read_json(folder / "config.json", "config.json", 64, links=False)
    except TinyLMError:
        return False
    key = "tinylm_export" if format == "transformer_lens" else "tinylm_format"
    return isinstance(config, dict) and key in config and (key == "tinylm_format" or config[key] == format)


def progress(line: str) -> None:
    print(f"export: {line}", file=sys.stderr, flush=True)


def run(cfg: DictConfig) -> Path:
    out = output_path(cfg)  # a bad out= is refused before torch is imported
    path, why = checkpoint_from_config(cfg)
    progress(f"loading {checkpoint_name(path, why)}")
    from tinylm.checkpoint import load_model
    from tinylm.onnx.export import export_onnx, require_export_packages

    if cfg.format != "onnx":
        return export_folder(cfg, out, load_model(path, why))
    require_export_packages()
    loaded = load_model(path, why)
    problem = get_task(loaded.task).export_problem  # an ONNX file continues text: it carries no task
    if problem is not None:
        raise TinyLMError(f"{checkpoint_name(path, why)} {problem}")
    out = export_onnx(loaded.model, loaded.tokenizer, out or path.with_suffix(".onnx"), loaded.global_step, progress)
    name = checkpoint_name(path, why, f"step {loaded.global_step}", f"{loaded.model.num_params():,} parameters")
    print(f"exported {name} to {shown_path(out)} ({out.stat().st_size / 2**20:.1f} MiB): checked with onnx.checker "
          "and ONNX Runtime")
    print(f"sample from it without PyTorch: python generate.py ckpt_path={shown_path(out)}")
    return out


def export_folder(cfg: DictConfig, out: Path | None, loaded) -> Path:
    """Write ``loaded`` as ``cfg.format``'s folder (``out``, else beside the checkpoint) and say how to load it."""
    name = checkpoint_name(loaded.path, loaded.why, f"step {loaded.global_step}",
                           f"{loaded.model.num_params():,} parameters")
    out = out or loaded.path.with_name(loaded.path.stem + FOLDER_SUFFIX[cfg.format])
    if cfg.format == "huggingface":
        from tinylm.interop.saved import save

        save(loaded, out)  # what lm.save_pretrained writes
        print(f"exported {name} to {shown_path(out)}/ (model.safetensors, config.json, tokenizer.json)")
        print(f"load it with tinylm.load({str(shown_path(out))!r}), or pass run_dir={shown_path(out)} to any command")
        return out
    from tinylm.interop.transformer_lens import compare, refusal, require_transformer_lens, save

    if problem := refusal(loaded.model):
        raise TinyLMError(f"{checkpoint_name(loaded.path, loaded.why)}: {problem}")
    require_transformer_lens()
    progress(f"writing {shown_path(out)}/")
    save(loaded.model, loaded.tokenizer, out)
    progress("loading it back with TransformerLens and comparing the logits")
    difference = compare(loaded.model, out)
    print(f"exported {name} to {shown_path(out)}/ for TransformerLens: its logits differ from tinylm's by at most "
          f"{difference:.1e}")
    print(f"load it with: import tinylm; model = tinylm.load_transformer_lens({str(shown_path(out))!r})")
    return out


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="export")
def main(cfg: DictConfig) -> None:
    run_command(run, cfg)


def run_command_line() -> None:
    launch(main, "export", (), PATH_KEYS)
