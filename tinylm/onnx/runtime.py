"""Sampling from an exported ONNX model with ONNX Runtime and numpy: no torch anywhere.

``load_onnx`` opens a file written by ``export.py`` (``tinylm.onnx.export`` documents the graph)
and rebuilds the tokenizer from its metadata. ``stream_tokens`` is ``tinylm.generation.sampling.stream_tokens``
in numpy, rule for rule: the prompt first, then one token per step with the keys and values of
the earlier positions fed back (``use_cache``), and past the context window the last window encoded
afresh each step. ``sample_next`` mirrors ``tinylm.generation.sampling.sample_next``. Greedy decoding picks
the same ids as the checkpoint; random draws come from a numpy generator, so a seed draws other
(equally likely) samples than it does with PyTorch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinylm.errors import TinyLMError
from tinylm.generation.prompting import text_pieces, validate_sampling
from tinylm.onnx.external import uses_external_data
from tinylm.tokenizer import Tokenizer, tokenizer_from_state
from tinylm.values import POSITIVE_INT, SHORT, one_line

ONNX_EXTRA = 'pip install -e ".[onnx]"'
EXPORT_HINT = "export a checkpoint with `python export.py ckpt_path=<checkpoint>`"
FORMAT = 1  # the graph's inputs and outputs and the metadata keys below; bumped when they change meaning
INPUTS = ("input_ids", "past_keys", "past_values")
OUTPUTS = ("logits", "present_keys", "present_values")
# metadata_props: every value is JSON
FORMAT_KEY, VERSION_KEY = "tinylm.format", "tinylm.version"
CONFIG_KEY, TOKENIZER_KEY = "tinylm.model_config", "tinylm.tokenizer"
STEP_KEY, PARAMS_KEY, WINDOW_KEY = "tinylm.global_step", "tinylm.num_params", "tinylm.context_window"


def import_onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise TinyLMError(f"sampling from an ONNX file needs onnxruntime: install it with {ONNX_EXTRA}") from None
    return onnxruntime


@dataclass
class OnnxModel:
    """An exported model, ready to run: the graph's session and what its metadata says."""

    session: object  # onnxruntime.InferenceSession
    tokenizer: Tokenizer
    path: Path
    global_step: int | None
    num_params: int
    context_window: int  # block_size: past + new positions never exceed it
    config: dict  # the checkpoint's model_config
    past_dims: tuple[int, int, int]  # (L, h, hs) of past_keys / past_values (L, B, h, P, hs)

    def empty_past(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and values of no earlier positions: (L, B, h, 0, hs) each."""
        layers, heads, head_size = self.past_dims
        empty = np.zeros((layers, batch_size, heads, 0, head_size), np.float32)
        return empty, empty

    def run(self, ids: np.ndarray, past: tuple[np.ndarray, np.ndarray]):
        """ids (B, T) after the positions of ``past`` -> logits (B, T, V) and the keys and values of all."""
        try:
            logits, keys, values = self.session.run(OUTPUTS, dict(zip(INPUTS, (ids, *past), strict=True)))
        except Exception as e:  # onnxruntime's own types (Fail, InvalidArgument, ...) derive from Exception only
            raise TinyLMError(f"ONNX Runtime failed to run {self.path} on input_ids of shape {ids.shape} after "
                              f"{past[0].shape[3]} earlier positions ({one_line(e, SHORT)}): the file is damaged or "
                              f"its metadata is wrong: {EXPORT_HINT}") from None
        return logits, (keys, values)


def load_onnx(path: str | Path, threads: int | None = None) -> OnnxModel:
    """Open an ONNX file written by export.py; anything else is refused with one TinyLMError line.

    The file is read once: those bytes are checked for external data (tinylm never writes any, and
    it would let the file read other files of its folder) and then given to ONNX Runtime, so the
    session runs exactly what was checked.
    """
    path = Path(path)
    if not path.is_file():
        raise TinyLMError(f"checkpoint file {path} does not exist: check ckpt_path=...")
    ort = import_onnxruntime()
    unreadable = f"{path} could not be read as an ONNX model"
    corrupt = f"it is corrupted, truncated or not ONNX: {EXPORT_HINT}"
    try:
        data = path.read_bytes()
        external = uses_external_data(data)
    except OSError as e:
        raise TinyLMError(f"{unreadable} ({e.strerror or one_line(e, SHORT)}): check its permissions") from None
    except ValueError as e:
        raise TinyLMError(f"{unreadable} ({one_line(e, SHORT)}): {corrupt}") from None
    if external:
        raise TinyLMError(f"{path} keeps tensors in other files (ONNX external data), which tinylm never writes "
                          f"and will not read: {EXPORT_HINT}")
    options = ort.SessionOptions()
    options.log_severity_level = 4  # fatal only: errors come back as exceptions, each one error: line
    if threads:
        options.intra_op_num_threads = threads
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own types for bad bytes and bad graphs
        raise TinyLMError(f"{unreadable} ({one_line(e, SHORT)}): {corrupt}") from None
    meta = session.get_modelmeta().custom_metadata_map
    try:
        if FORMAT_KEY not in meta:
            raise ValueError("no tinylm metadata")
        if json.loads(meta[FORMAT_KEY]) != FORMAT:
            raise ValueError(f"format {meta[FORMAT_KEY]}, this tinylm reads format {FORMAT}")
        names = ([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
        if names != (list(INPUTS), list(OUTPUTS)):
            raise ValueError(f"inputs {names[0]} and outputs {names[1]}, expected {list(INPUTS)} and {list(OUTPUTS)}")
        layers, _, heads, _, head_size = session.get_inputs()[1].shape
        config, tokenizer = json.loads(meta[CONFIG_KEY]), tokenizer_from_state(json.loads(meta[TOKENIZER_KEY]))
        model = OnnxModel(session, tokenizer, path, json.loads(meta[STEP_KEY]), int(json.loads(meta[PARAMS_KEY])),
                          json.loads(meta[WINDOW_KEY]), config, (int(layers), int(heads), int(head_size)))
    except (KeyError, TypeError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        raise TinyLMError(f"{path} is not an ONNX model exported by tinylm ({one_line(e, SHORT)}): "
                          f"{EXPORT_HINT}") from None
    problem = metadata_problem(model)
    if problem:
        raise TinyLMError(f"{path} has inconsistent metadata: {problem}: the file was altered or damaged: "
                          f"{EXPORT_HINT}")
    model.tokenizer.origin = f"ONNX model {path}"  # named by every message about its vocabulary
    return model


def metadata_problem(model: OnnxModel) -> str | None:
    """What in the metadata disagrees with itself or with the graph (None: nothing).

    The context window must be the model config's block_size, the config's layers, heads and head
    size the graph's past_keys dims, and the vocabulary the tokenizer's and the logits' size, which
    one step on one token (also a check that the graph runs) shows.
    """
    config, window = model.config, model.context_window
    if problem := POSITIVE_INT(window):
        return f"{WINDOW_KEY}={window!r} {problem}"
    keys = ("vocab_size", "block_size", "n_embd", "num_heads", "num_layers")
    sizes = [config.get(key) for key in keys] if isinstance(config, dict) else [None]
    if any(POSITIVE_INT(size) for size in sizes):
        return f"{CONFIG_KEY} needs positive integers {', '.join(keys)}"
    vocab, block_size, n_embd, heads, layers = sizes
    if window != block_size:
        return f"{WINDOW_KEY}={window} but the model config's block_size={block_size}"
    if (layers, heads, n_embd // heads) != model.past_dims:
        return (f"the graph's past_keys have (layers, heads, head size) {model.past_dims}, the model config "
                f"{(layers, heads, n_embd // heads)}")
    if model.tokenizer.vocab_size != vocab:
        return f"the tokenizer has {model.tokenizer.vocab_size} symbols, the model config's vocab_size={vocab}"
    logits, (keys_out, _) = model.run(np.zeros((1, 1), np.int64), model.empty_past(1))
    if logits.shape != (1, 1, vocab) or keys_out.shape != (layers, 1, heads, 1, n_embd // heads):
        return (f"one step gives logits of shape {logits.shape} and present_keys of shape {keys_out.shape}, "
                f"not {(1, 1, vocab)} and {(layers, 1, heads, 1, n_embd // heads)}")
    return None


# --------------------------------------------------------------------------------------------
# One step: logits -> next ids, as tinylm.generation.sampling does it


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))  # (B, V)
    return e / e.sum(axis=-1, keepdims=True)


def keep_top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """Mask (to -inf) every logit below the k-th largest of its row, ties kept. (B, V) -> (B, V)."""
    kth = np.sort(logits, axis=-1)[:, -min(k, logits.shape[-1]), None]  # (B, 1)
    return np.where(logits < kth, -np.inf, logits).astype(logits.dtype)


def keep_top_p(logits: np.ndarray, p: float) -> np.ndarray:
    """Keep the most likely tokens whose total probability first reaches p (and their ties). (B, V)."""
    if p >= 1:
        return logits
    probs = softmax(logits)  # (B, V)
    sorted_probs = -np.sort(-probs, axis=-1)  # (B, V), descending
    mass_above = sorted_probs.cumsum(axis=-1) - sorted_probs  # (B, V)
    n_kept = (mass_above < p).sum(axis=-1, keepdims=True)  # (B, 1), >= 1
    threshold = np.take_along_axis(sorted_probs, n_kept - 1, axis=-1)  # (B, 1): smallest kept probability
    return np.where(probs < threshold, -np.inf, logits).astype(logits.dtype)


def sample_next(logits: np.ndarray, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: np.random.Generator | None = None) -> np.ndarray:
    """Next ids (B,) from the last position's logits (B, V): ``tinylm.generation.sampling.sample_next`` in numpy.

    Temperature 0 is greedy (the first index wins a tie); else each row's largest logit is
    subtracted before dividing by the temperature (at least the dtype's smallest normal number),
    then top-k, then top-p, then one draw per row.
    """
    if temperature == 0:
        return logits.argmax(axis=-1)
    temperature = max(temperature, float(np.finfo(logits.dtype).tiny))
    with np.errstate(over="ignore"):  # a tiny temperature sends every other logit to -inf: greedy
        logits = ((logits - logits.max(axis=-1, keepdims=True)) / temperature).astype(logits.dtype)  # max 0
    if top_k is not None:
        logits = keep_top_k(logits, top_k)
    if top_p is not None:
        logits = keep_top_p(logits, top_p)
    cdf = softmax(logits).cumsum(axis=-1, dtype=np.float64)  # (B, V)
    generator = generator if generator is not None else np.random.default_rng()
    draws = generator.random(len(cdf)) * cdf[:, -1]  # (B,), in [0, total)
    return np.array([np.searchsorted(row, x, side="right") for row, x in zip(cdf, draws, strict=True)])


# --------------------------------------------------------------------------------------------
# The sampling loop


def _next_logits(model: OnnxModel, seq: np.ndarray, past):
    """Logits (B, V) for the token after ``seq`` (B, L), and the past to feed next time.

    As ``tinylm.generation.sampling._next_logits``: while the text fits in the window, only the positions
    not in ``past`` are encoded; past the window (or without a past) the last window afresh.
    """
    window = model.context_window
    if past is not None and seq.shape[1] <= window:
        logits, past = model.run(seq[:, past[0].shape[3] :], past)
    else:
        logits, _ = model.run(seq[:, -window:], model.empty_past(len(seq)))
    return logits[:, -1], past


def stream_tokens(model: OnnxModel, idx: np.ndarray, max_new_tokens: int, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None,
                  generator: np.random.Generator | None = None, use_cache: bool = True) -> Iterator[np.ndarray]:
    """Yield ``max_new_tokens`` steps of new ids, each (B,), continuing the prompt ``idx`` (B, T)."""
    validate_sampling(temperature, top_k, top_p, max_new_tokens)
    if idx.ndim != 2 or idx.shape[1] == 0:
        raise TinyLMError(f"prompt ids of shape {tuple(idx.shape)}: need (batch, >= 1 token)")
    B, T = idx.shape
    seq = np.empty((B, T + max_new_tokens), np.int64)  # (B, T+n)
    seq[:, :T] = idx

    def steps():
        past = model.empty_past(B) if use_cache else None
        for length in range(T, T + max_new_tokens):
            logits, past = _next_logits(model, seq[:, :length], past)
            seq[:, length] = sample_next(logits, temperature, top_k, top_p, generator)  # (B,)
            yield seq[:, length].copy()

    return steps()


def stream_text(model: OnnxModel, tokenizer: Tokenizer, prompt_ids: list[int], max_new_tokens: int,
                stop: str | None = None, **sampling) -> Iterator[str]:
    """One sample's continuation as printable pieces: ``tinylm.generation.sampling.stream_text`` on ONNX Runtime."""
    idx = np.array([prompt_ids], np.int64)  # (1, T)
    new_ids = (int(ids[0]) for ids in stream_tokens(model, idx, max_new_tokens, **sampling))
    yield from text_pieces(tokenizer, new_ids, stop)
