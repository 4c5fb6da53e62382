"""Export a model to one self-contained ONNX file that generates without PyTorch (``export.py``).

The graph is one decoding step, ``LanguageModel.step`` traced by ``torch.export`` (the exporter
behind ``torch.onnx.export(dynamo=True)``, which needs ``onnxscript``). L = layers, h = heads,
hs = head size, V = vocabulary; ``batch``, ``sequence`` and ``past`` are dynamic:

    inputs   input_ids       int64    (batch, sequence)         the new tokens
             past_keys       float32  (L, batch, h, past, hs)   keys of the past earlier positions
             past_values     float32  (L, batch, h, past, hs)   their values
    outputs  logits          float32  (batch, sequence, V)      next-token logits at every new position
             present_keys    float32  (L, batch, h, past + sequence, hs)   past_keys of the next step
             present_values  float32  (L, batch, h, past + sequence, hs)   past_values of the next step

The new tokens stand at positions past .. past + sequence - 1: the learned or sinusoidal table is
read there, rope rotates by those angles, and each new token attends to every earlier one and to
itself. ``past`` may be 0 (the prompt: a tensor with a 0-length axis), and past + sequence must
not exceed the context window (block_size): past it, a caller encodes the last window afresh with
no past, as ``tinylm.generation.sampling`` does (``tinylm.onnx.runtime``).

The file carries everything else as JSON in its ``metadata_props`` (keys in ``tinylm.onnx.runtime``):
the format, the tinylm version, the model config, the tokenizer state, the training step, the
parameter count and the context window. The graph is checked with ``onnx.checker``, written to a
temporary file next to the target and its logits compared there with PyTorch's on random ids; only
then is it renamed over the target, so a failure of any kind leaves an earlier export as it was.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import importlib
import json
import logging
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

import tinylm
from tinylm.errors import TinyLMError
from tinylm.models import LanguageModel
from tinylm.onnx.runtime import (
    CONFIG_KEY,
    FORMAT,
    FORMAT_KEY,
    INPUTS,
    ONNX_EXTRA,
    OUTPUTS,
    PARAMS_KEY,
    STEP_KEY,
    TOKENIZER_KEY,
    VERSION_KEY,
    WINDOW_KEY,
    load_onnx,
)
from tinylm.textfile import unwritable_folder
from tinylm.tokenizer import Tokenizer
from tinylm.values import SHORT, one_line

EXPORT_PACKAGES = ("onnx", "onnxscript", "onnxruntime")  # writing, tracing, checking
TOLERANCE = 1e-4  # largest difference allowed between ONNX Runtime's logits and PyTorch's
MIN_WINDOW = 3  # the example input has 2 new tokens (a size of 1 may be fixed as a constant) after a past


def require_export_packages() -> None:
    """One line naming what to install when the ``onnx`` extra is missing."""
    missing = []
    for name in EXPORT_PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise TinyLMError(f"exporting to ONNX needs {', '.join(missing)}: install them with {ONNX_EXTRA}")


class StepGraph(torch.nn.Module):
    """``model.step`` as a module whose forward takes the graph's inputs by name."""

    def __init__(self, model: LanguageModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids, past_keys, past_values):
        return self.model.step(input_ids, past_keys, past_values)


def check_exportable(model: LanguageModel) -> None:
    """Refuse, in one line, a model that has no ``step`` or too small a window for a dynamic graph."""
    if model.past_shape(1, 0) is None:
        raise TinyLMError(f"a model.arch={model.config.arch} model cannot be exported to ONNX: only the "
                          "Transformer (model=gpt) can; sample this checkpoint with generate.py instead")
    if model.context_window < MIN_WINDOW:
        raise TinyLMError(f"block_size={model.context_window} is too small to export to ONNX: it needs a "
                          f"block_size of at least {MIN_WINDOW}")


def trace(model: LanguageModel):
    """The step graph as an ``onnx.ModelProto``, with every size but L, h, hs and V dynamic."""
    window = model.context_window
    batch, sequence = torch.export.Dim("batch", min=1), torch.export.Dim("sequence", min=1, max=window)
    past = torch.export.Dim("past", min=0, max=window - 1)
    past_axes = {1: batch, 3: past}
    past_shape = model.past_shape(2, min(2, window - 2))  # sizes of 2 where they fit: a 1 may become a constant
    example = (torch.zeros(2, 2, dtype=torch.long), torch.zeros(past_shape), torch.zeros(past_shape))
    quiet = logging.getLogger("torch")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # warnings (one per torchvision op skipped), and errors we report below
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                StepGraph(model).eval(), example, dynamo=True, external_data=False, verbose=False,
                input_names=list(INPUTS), output_names=list(OUTPUTS),
                dynamic_shapes={"input_ids": {0: batch, 1: sequence}, "past_keys": past_axes,
                                "past_values": past_axes},
            )
    except Exception as e:  # torch.export and onnxscript raise many types; the first line says what
        reason = (re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip().splitlines() or [type(e).__name__])[0][:200]
        raise TinyLMError(f"torch.onnx.export failed ({type(e).__name__}: {reason}): please report it "
                          "with the checkpoint's model config") from None
    finally:
        quiet.setLevel(level)
    return program.model_proto


def metadata(model: LanguageModel, tokenizer: Tokenizer, global_step: int | None) -> dict[str, str]:
    """The file's metadata_props: plain JSON that ``tinylm.onnx.runtime.load_onnx`` reads back."""
    values = {FORMAT_KEY: FORMAT, VERSION_KEY: tinylm.__version__, CONFIG_KEY: asdict(model.config),
              TOKENIZER_KEY: tokenizer.state(), STEP_KEY: global_step, PARAMS_KEY: model.num_params(),
              WINDOW_KEY: model.context_window}
    return {key: json.dumps(value, ensure_ascii=False) for key, value in values.items()}


def compare_logits(model: LanguageModel, path: Path) -> float:
    """Largest logit difference between ONNX Runtime and PyTorch on random ids, with and without a past."""
    exported = load_onnx(path, threads=1)
    generator = torch.Generator().manual_seed(0)
    window, vocab = model.context_window, model.config.vocab_size
    ids = torch.randint(vocab, (2, window), generator=generator)  # (2, window)
    split = window // 2  # a prompt of `split` tokens with no past, then the rest after it
    worst = 0.0
    with torch.no_grad():
        keys, values = (torch.zeros(model.past_shape(2, 0)),) * 2
        for chunk in (ids[:, :split], ids[:, split:]):
            expected = model.step(chunk, keys, values)
            logits, past = exported.run(chunk.numpy(), (keys.numpy(), values.numpy()))
            for want, got in zip(expected, (logits, *past), strict=True):
                worst = max(worst, float(np.abs(want.numpy() - got).max()))
            keys, values = expected[1:]
    return worst


def check_output(out: Path) -> None:
    """Refuse in one line, before the long trace, an ``out`` whose folder cannot be made or written."""
    problem = unwritable_folder(out.parent)
    if problem is None:
        return
    folder, why = problem
    if not folder.is_dir():
        raise TinyLMError(f"cannot write {out}: {folder} {why}: choose another out=FILE.onnx")
    raise TinyLMError(f"cannot write {out}: the folder {folder} {why}: choose another out=FILE.onnx or make the "
                      "folder writable")


def file_problem(model: LanguageModel, path: Path) -> str | None:
    """Why the written file ``path`` is not the model (None: it is): ONNX Runtime's logits against PyTorch's."""
    try:
        worst = compare_logits(model, path)
    except Exception as e:  # onnxruntime refusing a shape the graph should take, or load_onnx refusing the file
        return f"ONNX Runtime cannot run it ({one_line(e, SHORT)})"
    return None if worst <= TOLERANCE else f"its logits are {worst:.2g} from PyTorch's (over {TOLERANCE:g})"


def remove_stale_temporaries(out: Path) -> list[Path]:
    """Remove the ``<out>.<pid>.tmp`` files that exports killed mid-write left next to ``out`` (their
    process is gone); a live export's file stays. Returns what was removed."""
    removed = []
    for tmp in out.parent.glob(f"{glob.escape(out.name)}.*.tmp"):
        pid = tmp.name[len(out.name) + 1:-len(".tmp")]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:  # gone: what it wrote is half a file
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(tmp)
        except (PermissionError, OverflowError):  # another user's process, or no such pid at all
            pass
    return removed


def write_checked(proto, model: LanguageModel, out: Path, progress: Callable[[str], None]) -> None:
    """Write ``proto`` to a temporary file next to ``out``, fsync and check it, then rename it over ``out``.

    As ``tinylm.training.safety.AtomicCheckpointIO``: ``out`` only ever changes by that rename, so kill -9,
    a full disk or a failed check leaves the file that was there (or none) as it was.
    """
    remove_stale_temporaries(out)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")  # one per process: two exports never share one
    kept = f"{out} is unchanged" if out.exists() else f"nothing was written to {out}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(proto.SerializeToString())
            f.flush()
            os.fsync(f.fileno())
        progress(f"comparing ONNX Runtime's logits with PyTorch's ({tmp.stat().st_size / 2**20:.1f} MiB written "
                 f"next to {out.name})")
        problem = file_problem(model, tmp)
        if problem:
            raise TinyLMError(f"the exported file failed its check, {problem}, so it was not kept ({kept}): "
                              "please report it with the checkpoint's model config")
        os.replace(tmp, out)  # atomic on POSIX: readers see the old file or the new one
    except OSError as e:  # a full disk, no permission, a read-only file system
        full = e.errno in (errno.ENOSPC, errno.EDQUOT)
        fix = "free some space or choose" if full else "check its permissions or choose"
        raise TinyLMError(f"could not write {out} ({e.strerror or one_line(e, SHORT)}), so {kept}: {fix} "
                          "another out=FILE.onnx") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def export_onnx(model: LanguageModel, tokenizer: Tokenizer, out: str | Path, global_step: int | None = None,
                progress: Callable[[str], None] = lambda line: None) -> Path:
    """Write ``model`` and ``tokenizer`` to the ONNX file ``out``, checked; returns its path.
    ``progress`` gets one short line as each phase starts (export.py prints them to stderr)."""
    require_export_packages()
    check_exportable(model)
    out = Path(out)
    check_output(out)
    import onnx  # the onnx extra, there now

    model.eval()  # no dropout in the graph
    progress("tracing one decoding step with torch.onnx.export (the longest part)")
    proto = trace(model)
    onnx.helper.set_model_props(proto, metadata(model, tokenizer, global_step))
    progress("checking the graph with onnx.checker")
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as e:
        raise TinyLMError(f"the exported graph fails onnx.checker ({one_line(e, SHORT)}): "
                          "please report it with the checkpoint's model config") from None
    write_checked(proto, model, out, progress)
    return out
