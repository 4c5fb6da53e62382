"""A model saved in the Hugging Face layout: one folder that ``tinylm.load``, every command and the tab read.

    <folder>/model.safetensors   the weights (the model's state_dict), data only: reading it runs no code
    <folder>/config.json         {"tinylm_format": 1, "model": <the checkpoint's model_config>, "task": ...,
                                  "tokenizer": <tinylm's tokenizer>, "global_step": ..., "tinylm_version": ...}
    <folder>/tokenizer.json      the tokenizer for other tools (``tinylm.interop.hf_tokenizer``)
    <folder>/README.md           its model card: what it is and how to load it (Hugging Face's metadata on top)

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
    from safetensors.torch import save as safetensors_bytes

    from tinylm.interop.hf_tokenizer import hf_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    # each tensor its own contiguous copy: a tied lm_head shares its matrix, which safetensors will not write twice
    weights = {name: t.detach().cpu().contiguous().clone() for name, t in loaded.model.state_dict().items()}
    # as bytes, then written as any file (safetensors' own save_file makes it readable by its owner only)
    (folder / SAVED_WEIGHTS).write_bytes(safetensors_bytes(weights, metadata={"format": "pt"}))
    hf_tokenizer(loaded.tokenizer).save(str(folder / TOKENIZER_FILE))
    config = saved_config(loaded)
    (folder / SAVED_CONFIG).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    card = folder / "README.md"
    if not card.exists():  # a card of the user's own stays
        card.write_text(model_card(loaded, config), encoding="utf-8")


def model_card(loaded: LoadedModel, config: dict) -> str:
    """The folder's README.md: Hugging Face's metadata, what the model is, and how to load it."""
    model = loaded.model
    facts = [f"{model.config.arch} model", f"{model.num_params():,} parameters", f"{loaded.task} task",
             f"vocabulary of {loaded.tokenizer.vocab_size} ({loaded.tokenizer.kind})"]
    if loaded.global_step is not None:
        facts.append(f"trained {loaded.global_step:,} steps")
    settings = ", ".join(f"{key}={value}" for key, value in config["model"].items() if key != "vocab_size")
    use = ("print(lm.translate(source))                  # one line of source text in, its translation out"
           if loaded.task == "translation" else "print(lm.generate(max_new_tokens=100, seed=1))")
    level = {"char": "character-level", "byte": "byte-level", "bpe": "byte-level-bpe"}[loaded.tokenizer.kind]
    return f"""---
library_name: tinylm
tags: [tinylm, {level}, interpretability]
---

# A tinylm model

A {", ".join(facts)}, saved by tinylm {config["tinylm_version"]}.
Model settings: {settings}.

```python
import tinylm

lm = tinylm.load("path/to/this/folder")      # or tinylm.LM.from_pretrained("user/name") from the Hub
{use}
```

Every tinylm command reads the folder as a checkpoint: `python generate.py run_dir=path/to/this/folder`.
"""
