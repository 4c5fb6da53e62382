"""``ShapeTrace`` (``debug=shapes``): the shape of every stage of one forward pass, printed."""

from __future__ import annotations

import lightning as L

from tinylm.callbacks.inspector import guarded
from tinylm.models.base import eval_no_grad
from tinylm.models.tracing import shape_table, trace_shapes


class ShapeTrace(L.Callback):
    """Print the shape of every stage of the forward pass for the first training batch.

    While tracing, attention takes its explicit path, so the (B, h, T, T) scores appear even when
    the model trains with SDPA. The legend names the model's own dimensions (``dimensions()``).
    """

    def __init__(self):
        self.done = False

    def print_trace(self, module, batch) -> None:
        x, y = batch  # (B, T) each
        model = module.model
        with trace_shapes() as rows, eval_no_grad(model):
            model(x, y)
        sizes = {"B (sequences per batch)": x.size(0), "T (positions)": x.size(1), **model.dimensions()}
        print(f"\nforward pass of one batch, {model.config.num_layers} block(s):\n")
        print(shape_table(rows, sizes), flush=True)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.done or not trainer.is_global_zero:
            return
        self.done = True
        guarded("ShapeTrace", trainer.global_step, lambda: self.print_trace(pl_module, batch))
