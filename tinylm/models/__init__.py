"""The model family: one module per architecture, one registry, one interface (``LanguageModel``).

``model.arch`` in the model config picks the architecture (``gpt`` when absent, as in checkpoints
of release 0.1). To add one: write its module (a ``ModelConfig`` dataclass and a
``LanguageModel``), add a ``conf/model/<name>.yaml`` and an entry in ``ARCHITECTURES`` below.
"""

from __future__ import annotations

from tinylm.models.base import LanguageModel, ModelConfig
from tinylm.models.gpt import GPT, GPTConfig
from tinylm.models.rnn import RNNConfig, RNNLanguageModel
from tinylm.models.seq2seq import Seq2Seq, Seq2SeqConfig

# arch -> (config dataclass, model class)
ARCHITECTURES: dict[str, tuple[type[ModelConfig], type[LanguageModel]]] = {
    "gpt": (GPTConfig, GPT),
    "lstm": (RNNConfig, RNNLanguageModel),
    "gru": (RNNConfig, RNNLanguageModel),
    "seq2seq": (Seq2SeqConfig, Seq2Seq),
}

__all__ = ["ARCHITECTURES", "LanguageModel", "ModelConfig", "build_model", "model_config_problems"]


def model_config_problems(cfg: dict) -> list[str]:
    """Everything wrong with a model config of any architecture, each one line."""
    arch = cfg.get("arch", "gpt")
    if arch not in ARCHITECTURES:
        choices = ", ".join(ARCHITECTURES)
        return [f"model.arch={arch!r}: choose one of {choices} (model=gpt, model=lstm or model=seq2seq)"]
    return ARCHITECTURES[arch][0].problems({"arch": arch, **cfg})


def build_model(config: dict) -> LanguageModel:
    """The model a config describes (a checkpoint's ``model_config``, or ``model.*`` plus ``vocab_size``)."""
    config = {"arch": "gpt", **config}
    if config["arch"] not in ARCHITECTURES:
        raise ValueError(model_config_problems(config)[0])
    config_class, model_class = ARCHITECTURES[config["arch"]]
    return model_class(config_class(**config))
