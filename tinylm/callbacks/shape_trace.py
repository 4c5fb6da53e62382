"""``ShapeTrace`` (``debug=shapes``): the shape of every hook point one forward pass reaches, printed."""

from __future__ import annotations

import lightning as L

from tinylm.callbacks.inspector import guarded
from tinylm.callbacks.shapes import shape_table


class ShapeTrace(L.Callback):
    """Print the shape of every hook point of the forward pass for the first training batch.

    The rows come from ``model.run_with_cache`` (``tinylm.callbacks.shapes``): a hook on the attention
    weights makes even a model that trains with SDPA write its (B, h, T, T) scores out. The legend
    names the model's own dimensions (``dimensions()``).
    """

    def __init__(self):
        self.done = False

    def print_trace(self, module, batch) -> None:
        model = module.model
        table = shape_table(model, tuple(batch))  # (ids, targets), or (source, target, targets)
        print(f"\nforward pass of one batch, every hook point in the order it is reached "
              f"({len(model.hook_points())}: model.hook_points()):\n")
        print(table, flush=True)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.done or not trainer.is_global_zero:
            return
        self.done = True
        guarded("ShapeTrace", trainer.global_step, lambda: self.print_trace(pl_module, batch))
