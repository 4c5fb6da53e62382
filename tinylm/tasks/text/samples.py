"""``SampleText``: text generated from fixed prompts with a fixed seed, in the Text tab."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tinylm.callbacks.inspector import PeriodicInspector, tensorboard_writer, training_text_opening, without_unknown
from tinylm.errors import TinyLMError
from tinylm.generation.prompting import encode_prompt, validate_sampling
from tinylm.generation.sampling import generate
from tinylm.tokenizer import Tokenizer, tokenizer_from_state
from tinylm.values import check_value, integer


class SampleText(PeriodicInspector):
    """Continue fixed prompts with ``tinylm.generation.sampling.generate`` and log the text.

    ``prompts``: list of strings; null takes the first ``prompt_chars`` characters of the
    training text's first line. Characters outside the vocabulary are skipped with a warning.
    The generator is re-seeded with ``seed`` for every prompt, so at two different steps the
    samples differ only because the model did.
    """

    def __init__(
        self,
        every_n_steps: int | None = 500,
        prompts: Sequence[str] | None = None,
        prompt_chars: int = 4,
        max_new_tokens: int = 64,
        temperature: float = 0.8,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int = 1234,
    ):
        super().__init__(every_n_steps)
        validate_sampling(temperature, top_k, top_p, max_new_tokens)
        if prompts is not None and (
            isinstance(prompts, str) or not all(isinstance(p, str) for p in prompts)
        ):
            raise TinyLMError(f"SampleText.prompts={prompts!r} must be a list of strings or null")
        check_value("SampleText.prompt_chars", prompt_chars, integer(1))
        self.prompts = None if prompts is None else list(prompts)
        self.prompt_chars = prompt_chars
        self.max_new_tokens, self.seed = max_new_tokens, seed
        self.sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
        self._prompt_ids: list[list[int]] | None = None

    def samples(self, model, tokenizer: Tokenizer, prompt_ids: list[list[int]]):
        """(prompt, continuation) text pairs, one per prompt, reproducible for given weights."""
        device = next(model.parameters()).device
        pairs = []
        for ids in prompt_ids:
            generator = torch.Generator(device).manual_seed(self.seed)
            idx = torch.tensor([ids], dtype=torch.long, device=device)  # (1, T)
            out = generate(model, idx, self.max_new_tokens, generator=generator, **self.sampling)
            pairs.append((tokenizer.decode(ids), tokenizer.decode(out[0, len(ids):].tolist())))
        return pairs

    def inspect(self, trainer, module) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None:
            return
        tokenizer = tokenizer_from_state(module.tokenizer_state)
        if self._prompt_ids is None:
            prompts = self.prompts or [
                training_text_opening(trainer, tokenizer, self.prompt_chars)
            ]
            self._prompt_ids = [
                encode_prompt(tokenizer, without_unknown(tokenizer, p, "sample prompt"), "skip")
                for p in prompts
            ]
        pairs = self.samples(module.model, tokenizer, self._prompt_ids)
        writer.add_text("samples", samples_markdown(pairs, trainer.global_step, self.seed,
                                                    self.sampling), trainer.global_step)


def _code_block(text: str) -> str:
    """Markdown code block by indentation: shows any text verbatim, newlines included."""
    return "\n".join("    " + line for line in text.split("\n"))


def samples_markdown(pairs, step: int, seed: int, sampling: dict) -> str:
    """TensorBoard Text-tab Markdown: for each sample, the prompt, then the continuation."""
    settings = ", ".join(f"{k}={v}" for k, v in sampling.items() if v is not None)
    parts = [f"Step {step}, {settings}, seed {seed}."]
    for i, (prompt, continuation) in enumerate(pairs, 1):
        parts += [f"**Prompt {i}:**", _code_block(prompt),
                  f"**Continuation {i}** (generated):", _code_block(continuation)]
    return "\n\n".join(parts)
