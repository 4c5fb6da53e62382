"""``LM``'s ways out to the ecosystem (docs/interop.md), a mixin of ``tinylm.api.lm.LM``:

- ``lm.save_pretrained(folder)``: the Hugging Face layout (``tinylm.interop.saved``), which ``tinylm.load(folder)``,
  the commands and the tab read back. Through huggingface_hub's ``ModelHubMixin``: ``push_to_hub`` and
  ``LM.from_pretrained(folder or "user/name")`` come with it (a name on the Hub is downloaded first);
- ``lm.to_transformer_lens()``: a TransformerLens ``HookedTransformer`` with the same logits and hook points
  (``tinylm.interop.transformer_lens``; the ``interop`` extra).
"""

from __future__ import annotations

import re
from pathlib import Path

from huggingface_hub import ModelHubMixin

from tinylm.checkpoint import load_saved
from tinylm.errors import TinyLMError
from tinylm.run_folder import SAVED_WEIGHTS, saved_model, shown_path


def hub_name(name: str) -> bool:
    """Whether ``name`` reads as a name on the Hub (``user/name``), not as a path on this machine."""
    return re.fullmatch(r"[\w.-]+/[\w.-]+", name) is not None and not name.startswith((".", "~"))


class InteropMixin(
    ModelHubMixin,
    library_name="tinylm",
    tags=["tinylm", "interpretability"],
):
    """What ``LM`` does through huggingface_hub and TransformerLens (``self.loaded``: the model and tokenizer)."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        """The ``LM`` of a folder ``save_pretrained`` wrote, or of a name on the Hub (``user/name``: downloaded
        first); a path that is neither is one TinyLMError, before anything asks the network."""
        name = str(pretrained_model_name_or_path)
        if not Path(name).expanduser().is_dir() and not hub_name(name):
            raise TinyLMError(f"folder {name} does not exist: pass a folder lm.save_pretrained wrote, or a name "
                              "on the Hugging Face Hub as user/name")
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    def _save_pretrained(self, save_directory: Path) -> None:  # its README.md too: the mixin's card stays unwritten
        from tinylm.interop.saved import save

        save(self.loaded, Path(save_directory))

    @classmethod
    def _from_pretrained(cls, *, model_id: str, revision, cache_dir, force_download: bool, local_files_only: bool,
                         token, **model_kwargs):
        folder = Path(model_id).expanduser()
        if not folder.is_dir():  # a name on the Hub: its files, downloaded (or from the cache)
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(repo_id=model_id, revision=revision, cache_dir=cache_dir, token=token,
                                            force_download=force_download, local_files_only=local_files_only))
        if saved_model(folder) is None:
            raise TinyLMError(f"{shown_path(folder)} is not a saved tinylm model (no {SAVED_WEIGHTS} beside a "
                              "config.json): save one with lm.save_pretrained(folder)")
        return cls(load_saved(folder / SAVED_WEIGHTS, "a saved model folder"), **model_kwargs)

    def to_transformer_lens(self):
        """This GPT as a TransformerLens ``HookedTransformer`` (eval mode, float32, on the CPU) whose logits and
        hook points equal this model's, and whose ``to_tokens``/``to_string`` use this tokenizer; an option
        TransformerLens cannot hold exactly is one TinyLMError line naming it."""
        from tinylm.interop.transformer_lens import to_transformer_lens

        return to_transformer_lens(self.model, self.tokenizer)
