"""A model saved in the Hugging Face layout: one folder that ``tinylm.load``, every command and the tab read.

    <folder>/model.safetensors   the weights (the model's state_dict), data only: reading it runs no code
    <folder>/config.json         {"tinylm_format": 1, "model": <the checkpoint's model_config>, "task": ...,
                                  "tokenizer": <tinylm's tokenizer>, "global_step": ..., "tinylm_version": ...}
    <folder>/tokenizer.json      the tokenizer for other tools (``tinylm.interop.hf_tokenizer``)
    <folder>/README.md           the model card huggingface_hub writes (``LM.save_pretrained``)

``save`` writes it (``LM.save_pretrained`` through huggingface_hub's ``ModelHubMixin``, so ``push_to_hub`` and
``LM.from_pretrained("user/name")`` come with it); ``tinylm.checkpoint.load_model`` reads it as it reads a
checkpoint (``load_saved``), with the same checks of the config against the weights. A BPE tokenizer is kept
once, in tokenizer.json (config.json says so).
"""

from __future__ import annotations

import json
from pathlib import Path

from tinylm.checkpoint import SAVED_FORMAT, TOKENIZER_FILE
from tinylm.run_folder import SAVED_CONFIG, SAVED_WEIGHTS
from tinylm.tasks.base import LoadedModel


def saved_config(loaded: LoadedModel) -> dict:
    """What config.json holds for ``loaded``'s model and tokenizer."""
    import tinylm
    from tinylm.models import model_config

    tokenizer = loaded.tokenizer.state()
    if tokenizer["kind"] == "bpe":
        tokenizer = {"kind": "bpe", "file": TOKENIZER_FILE}
    return {"tinylm_format": SAVED_FORMAT, "library_name": "tinylm", "tinylm_version": tinylm.__version__,
            "model_type": f"tinylm-{loaded.model.config.arch}", "task": loaded.task,
            "global_step": loaded.global_step, "model": model_config(loaded.model), "tokenizer": tokenizer}


def save(loaded: LoadedModel, folder: Path) -> None:
    """Write ``loaded``'s model (weights, config, tokenizer) into ``folder`` (made if missing)."""
    from safetensors.torch import save_file

    from tinylm.interop.hf_tokenizer import hf_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    # each tensor its own contiguous copy: a tied lm_head shares its matrix, which safetensors will not write twice
    weights = {name: t.detach().cpu().contiguous().clone() for name, t in loaded.model.state_dict().items()}
    save_file(weights, folder / SAVED_WEIGHTS, metadata={"format": "pt"})
    hf_tokenizer(loaded.tokenizer).save(str(folder / TOKENIZER_FILE))
    (folder / SAVED_CONFIG).write_text(json.dumps(saved_config(loaded), indent=2, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
