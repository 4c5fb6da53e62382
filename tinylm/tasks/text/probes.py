"""``NextTokenProbes``: P(expected | context) for fixed pairs, in the Scalars tab."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn import functional as F

from tinylm.callbacks.inspector import PeriodicInspector, log
from tinylm.errors import TinyLMError
from tinylm.models.base import eval_no_grad
from tinylm.plots import figures as plotting
from tinylm.tokenizer import Tokenizer, tokenizer_from_state


class NextTokenProbes(PeriodicInspector):
    """Log P(expected | context) for fixed (context, expected) pairs as ``probe/<ctx>→<exp>``.

    The probability of a multi-token ``expected`` (e.g. a Chinese character under the byte
    tokenizer) is the product of its tokens' probabilities, read from one teacher-forced pass.
    Pairs with characters outside the vocabulary are skipped with a warning.
    """

    def __init__(self, every_n_steps: int | None = 50,
                 probes: Sequence[Sequence[str]] = (("Transforme", "r"), ("注意", "力"))):
        super().__init__(every_n_steps)
        for pair in probes:
            if (isinstance(pair, str) or len(pair) != 2
                    or not all(isinstance(s, str) and s for s in pair)):
                raise TinyLMError(
                    f"NextTokenProbes.probes: {pair!r} must be a [context, expected] pair of "
                    "non-empty strings, e.g. [Transforme, r]"
                )
        self.probes = [tuple(pair) for pair in probes]
        self._encoded: dict[str, tuple[list[int], int]] | None = None

    def encode(self, tokenizer: Tokenizer, block_size: int) -> dict[str, tuple[list[int], int]]:
        """Scalar name -> (context + expected ids, number of context ids), dropping bad pairs."""
        encoded = {}
        for context, expected in self.probes:
            missing = tokenizer.unknown(context + expected)
            if missing:
                log.warning("next-token probe %r -> %r skipped: %s not in the vocabulary",
                            context, expected, " ".join(repr(c) for c in missing))
                continue
            target = tokenizer.encode(expected)
            if len(target) >= block_size:
                log.warning("next-token probe %r -> %r skipped: expected text is longer than "
                            "block_size", context, expected)
                continue
            ctx = tokenizer.encode(context)[-(block_size - len(target)):]  # crop oldest first
            name = "".join(plotting.visible(c) for c in context) + "→" + "".join(
                plotting.visible(c) for c in expected)
            encoded[f"probe/{name}"] = (ctx + target, len(ctx))
        return encoded

    def probabilities(self, model, encoded) -> dict[str, float]:
        device = next(model.parameters()).device
        result = {}
        with eval_no_grad(model):
            for name, (ids, n_ctx) in encoded.items():
                idx = torch.tensor([ids], device=device)  # (1, L)
                logits, _ = model(idx)  # (1, L, V)
                log_probs = F.log_softmax(logits[0, n_ctx - 1 : -1].float(), dim=-1)  # (n_exp, V)
                targets = idx[0, n_ctx:]  # (n_exp,)
                result[name] = log_probs.gather(1, targets[:, None]).sum().exp().item()
        return result

    def inspect(self, trainer, module) -> None:
        if not trainer.loggers:
            return
        if self._encoded is None:
            tokenizer = tokenizer_from_state(module.tokenizer_state)
            self._encoded = self.encode(tokenizer, module.model.config.block_size)
        metrics = self.probabilities(module.model, self._encoded)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
