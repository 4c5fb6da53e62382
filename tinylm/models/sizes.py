"""How big a model is, from its config alone: the names and shapes of its weights, its parameter count
and the memory it takes, computed without building it (a config may ask for more than any machine holds).

Each built-in architecture's layout is written out here (``LAYOUTS``, tested against the models
themselves), so the model files stay the architecture alone. Two checks use it before a model is built:

- ``size_problem``: a model whose weights and buffers do not fit in the memory this process can still
  take (``available_memory``), said with the numbers; ``tinylm.models.build_model`` asks it before
  every build, and train.py's config check before any data is read;
- ``weights_problem``: a checkpoint's weights that are not what its ``model_config`` describes (a
  crafted or damaged file asking for a huge model with a few bytes of weights, or with tensors that
  store fewer numbers than their shapes hold), before the loader builds the model.

Arithmetic on Python integers only: no torch, nothing allocated however large the config.
"""

from __future__ import annotations

import math
import resource
from dataclasses import dataclass
from pathlib import Path

from tinylm.models.built_in import BUILT_IN, CHECKS

FLOAT_BYTES = 4  # parameters are built as float32
# what each tensor costs beyond its numbers (the tensor, its module's share, Python's objects): 20,000 GPT
# blocks of 15 tiny tensors each took about 37 KB of memory per block beyond their numbers (CPython 3.11, torch 2.13)
TENSOR_OVERHEAD = 2500


@dataclass(frozen=True)
class Group:
    """Tensors repeated for each index ``i`` of ``indices``: name template (``{i}``: the index) -> shape."""

    tensors: dict[str, tuple[int, ...]]
    indices: range = range(1)
    itemsize: int = FLOAT_BYTES

    def elements(self) -> int:
        return len(self.indices) * sum(math.prod(shape) for shape in self.tensors.values())

    def count(self) -> int:
        return len(self.indices) * len(self.tensors)


@dataclass(frozen=True)
class Layout:
    """A model's weights (its state dict), the buffers it also allocates (masks and tables it never saves),
    and the elements its weights hold twice (a head tied to the token embedding)."""

    weights: list[Group]
    buffers: list[Group]
    shared: int = 0

    def tensor_count(self) -> int:
        return sum(g.count() for g in self.weights)

    def parameters(self) -> int:
        return sum(g.elements() for g in self.weights) - self.shared

    def buffer_bytes(self) -> int:
        return sum(g.elements() * g.itemsize for g in self.buffers)

    def bytes(self) -> int:
        """The memory the built model takes: its parameters, its buffers and each tensor's overhead."""
        tensors = self.tensor_count() + sum(g.count() for g in self.buffers)
        return self.parameters() * FLOAT_BYTES + self.buffer_bytes() + tensors * TENSOR_OVERHEAD

    def shapes(self):
        """(name, shape) of every weight, group by group: only for a layout already known to be small."""
        for group in self.weights:
            for i in group.indices:
                for name, shape in group.tensors.items():
                    yield name.format(i=i), shape


def norm(name: str, c: int, kind: str = "layernorm") -> dict:
    """A LayerNorm's weight and bias; an RMSNorm's weight alone."""
    return {f"{name}.weight": (c,), **({f"{name}.bias": (c,)} if kind == "layernorm" else {})}


def attention(name: str, c: int) -> dict:
    return {f"{name}.qkv.weight": (3 * c, c), f"{name}.proj.weight": (c, c), f"{name}.proj.bias": (c,)}


def feed_forward(name: str, c: int) -> dict:
    return {f"{name}.fc.weight": (4 * c, c), f"{name}.fc.bias": (4 * c,), f"{name}.proj.weight": (c, 4 * c),
            f"{name}.proj.bias": (c,)}


def attention_buffers(name: str, cfg: dict, causal: bool, rope: bool) -> list[Group]:
    """One attention module's buffers: a causal mask (bool) and bias (T, T), rope's cos and sin (T, hs/2)."""
    t, half = cfg["block_size"], cfg["n_embd"] // cfg["num_heads"] // 2
    found = []
    if causal:
        found += [Group({f"{name}.causal_mask": (t, t)}, itemsize=1), Group({f"{name}.causal_bias": (t, t)})]
    if rope:
        found.append(Group({f"{name}.rotary.cos": (t, half), f"{name}.rotary.sin": (t, half)}))
    return found


def embeddings(cfg: dict) -> tuple[dict, list[Group]]:
    """The token embedding and, by ``pos_encoding``, a learned position table (a weight) or a fixed one (a buffer)."""
    v, t, c = cfg["vocab_size"], cfg["block_size"], cfg["n_embd"]
    weights = {"token_embedding.weight": (v, c)}
    positions = cfg.get("pos_encoding", "learned")
    if positions == "learned":
        weights["position_embedding.weight"] = (t, c)
    return weights, [Group({"position_embedding.table": (t, c)})] if positions == "sinusoidal" else []


def repeated(groups: list[Group], count: int) -> list[Group]:
    """Groups written for one layer, repeated for layers 0 .. count-1."""
    return [Group(g.tensors, range(count), g.itemsize) for g in groups]


def gpt_layout(cfg: dict) -> Layout:
    v, c, kind = cfg["vocab_size"], cfg["n_embd"], cfg.get("norm", "layernorm")
    top, buffers = embeddings(cfg)
    block = {**norm("ln1", c, kind), **attention("attn", c), **norm("ln2", c, kind), **feed_forward("ffwd", c)}
    rope = cfg.get("pos_encoding") == "rope"
    layers = cfg["num_layers"]
    end = {**norm("ln_f", c, kind), "lm_head.weight": (v, c), "lm_head.bias": (v,)}
    return Layout([Group(top), Group(prefixed("blocks.{i}.", block), range(layers)), Group(end)],
                  buffers + repeated(attention_buffers("blocks.{i}.attn", cfg, True, rope), layers),
                  shared=v * c if cfg.get("tied_head", False) else 0)


def seq2seq_layout(cfg: dict) -> Layout:
    v, c = cfg["vocab_size"], cfg["n_embd"]
    top, buffers = embeddings(cfg)
    rope = cfg.get("pos_encoding") == "rope"
    encoder = {**norm("ln1", c), **attention("attn", c), **norm("ln2", c), **feed_forward("ffwd", c)}
    decoder = {**norm("ln1", c), **attention("self_attn", c), **norm("ln2", c), **attention("cross_attn", c),
               **norm("ln3", c), **feed_forward("ffwd", c)}
    enc, dec = cfg["encoder_layers"], cfg["decoder_layers"]
    weights = [Group(top), Group(prefixed("encoder.{i}.", encoder), range(enc)), Group(norm("ln_memory", c)),
               Group(prefixed("decoder.{i}.", decoder), range(dec)),
               Group({**norm("ln_f", c), "lm_head.weight": (v, c), "lm_head.bias": (v,)})]
    return Layout(weights, buffers + repeated(attention_buffers("encoder.{i}.attn", cfg, False, rope), enc)
                  + repeated(attention_buffers("decoder.{i}.self_attn", cfg, True, rope), dec))


def rnn_layout(cfg: dict) -> Layout:
    v, e, h = cfg["vocab_size"], cfg["n_embd"], cfg["hidden_size"]
    gates = (4 if cfg["arch"] == "lstm" else 3) * h  # an LSTM's input, forget, cell and output gates; a GRU's three

    def layer(inputs: int) -> dict:
        return {"rnn.weight_ih_l{i}": (gates, inputs), "rnn.weight_hh_l{i}": (gates, h),
                "rnn.bias_ih_l{i}": (gates,), "rnn.bias_hh_l{i}": (gates,)}

    return Layout([Group({"token_embedding.weight": (v, e)}), Group(layer(e)),
                   Group(layer(h), range(1, cfg["num_layers"])),
                   Group({"lm_head.weight": (v, h), "lm_head.bias": (v,)})], [])


def prefixed(prefix: str, tensors: dict) -> dict:
    return {prefix + name: shape for name, shape in tensors.items()}


LAYOUTS = {"gpt": gpt_layout, "lstm": rnn_layout, "gru": rnn_layout, "seq2seq": seq2seq_layout}
SIZE_KEYS = {"gpt": ("n_embd", "num_layers", "block_size"), "lstm": ("n_embd", "hidden_size", "num_layers"),
             "gru": ("n_embd", "hidden_size", "num_layers"),
             "seq2seq": ("n_embd", "encoder_layers", "decoder_layers", "block_size")}


def layout_of(cfg: dict) -> Layout | None:
    """The layout of a valid config (``model_config_problems`` says none) of a built-in architecture; None for
    a model class of the user's own (its own build is its check)."""
    target, arch = cfg.get("_target_"), cfg.get("arch", "gpt")
    if target is not None and (target not in CHECKS or BUILT_IN.get(arch, (None,))[0] != target):
        return None
    return LAYOUTS[arch](cfg) if arch in LAYOUTS else None


def _int(text: str) -> int | None:
    return int(text) if text.strip().isdecimal() else None


def available_memory() -> int | None:
    """Bytes this process can still allocate: the least of the kernel's MemAvailable, the cgroup's limit
    less its use, and the address-space limit (``ulimit -v``) less what the process has mapped. None where
    none of them can be read (not Linux)."""
    found = []

    def read(path: str) -> str:
        try:
            return Path(path).read_text()
        except (OSError, UnicodeDecodeError):
            return ""

    for line in read("/proc/meminfo").splitlines():
        if line.startswith("MemAvailable:") and (kib := _int(line.split()[1])) is not None:
            found.append(kib * 1024)
    for limit, used in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        cap, current = _int(read(limit)), _int(read(used))
        if cap is not None and current is not None:
            found.append(max(cap - current, 0))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        mapped = next((_int(line.split()[1]) for line in read("/proc/self/status").splitlines()
                       if line.startswith("VmSize:")), 0) or 0
        found.append(max(soft - mapped * 1024, 0))
    return min(found) if found else None


def human(n: float) -> str:
    """A byte count in binary units: 12.0 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # the loop returns at PiB


def size_problem(cfg: dict, vocabulary_known: bool = True, available: int | None = None) -> str | None:
    """One line if the model ``cfg`` describes (valid, of a built-in architecture) cannot fit in memory: its
    parameter count and bytes against the memory available (``available``, else ``available_memory()``).
    ``vocabulary_known=False``: ``cfg``'s vocab_size is a stand-in (1, before the data is read), so the
    counts are lower bounds."""
    layout = layout_of(cfg)
    if layout is None:
        return None
    available = available_memory() if available is None else available
    need = layout.bytes()
    if available is None or need <= available:
        return None
    params, weights = layout.parameters(), layout.parameters() * FLOAT_BYTES
    least = "" if vocabulary_known else "at least "
    buffers = f", about {human(need)} built, with its buffers" if human(need) != human(weights) else ""
    arch = cfg.get("arch", "gpt")
    sizes = ", ".join(f"model.{key}={cfg[key]}" for key in SIZE_KEYS[arch])
    return (f"the model is too big for this machine's memory: {sizes} make {least}{params:,} parameters "
            f"({least}{human(weights)} as float32{buffers}), but {human(available)} of memory is available: "
            f"choose smaller model sizes")


def weights_problem(cfg: dict, weights: dict) -> str | None:
    """What does not fit between a checkpoint's ``model_config`` (valid, complete: every field of its
    config class) and its weights (``state_dict``, without Lightning's ``model.`` prefix), found
    without building the model: the count of tensors first (arithmetic, whatever the config asks for),
    then each tensor's name and shape (not for a model class of the user's own), then, for every
    tensor, that it holds the numbers its shape says (``hollow``). None when they fit."""
    layout = layout_of(cfg)
    if layout is not None:
        wanted, held = layout.tensor_count(), len(weights)
        if wanted != held:
            return f"its model_config describes {wanted:,} weight tensors but its state_dict holds {held:,}"
        for name, shape in layout.shapes():  # as many as the state_dict holds
            if name not in weights:
                return f"its state_dict has no {name}, which its model_config describes"
            held = tuple(getattr(weights[name], "shape", ()))
            if held != shape:
                return f"size mismatch for {name}: its state_dict holds {held}, its model_config describes {shape}"
    return next((problem for name, tensor in weights.items() if (problem := hollow(name, tensor))), None)


def hollow(name: str, tensor: object) -> str | None:
    """One line if ``tensor`` stores fewer bytes than its shape says it holds (a tensor expanded from a few
    numbers, stride 0: a checkpoint of a few KB passing for a model of any size); None for what is no tensor."""
    if not hasattr(tensor, "untyped_storage"):
        return None
    stored, shown = tensor.untyped_storage().nbytes(), tensor.numel() * tensor.element_size()
    if stored >= shown:
        return None
    return (f"its state_dict's {name} stores {human(stored)} for its shape {tuple(tensor.shape)} of "
            f"{human(shown)}: its weights are not what their shapes say")
