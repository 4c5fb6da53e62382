"""What every attention view shares: ``AttentionInspector``, the base of the attention views of every task
(a model without attention is skipped, said once); ``add_rgb_image``, how they log a figure (``png``);
``record_in_run_folder``, the text a view is drawn on; ``weights_summary``, the raw attention weights for the
tinylm TensorBoard plugin (``WEIGHTS_TAG``)."""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import torch

from tinylm.callbacks.inspector import PeriodicInspector, log
from tinylm.tasks.probe_text import record_probe


def png(rgb: np.ndarray) -> bytes:
    """(H, W, 3) uint8 pixels as a PNG file: 8-bit RGB, rows unfiltered, zlib level 3.

    ``SummaryWriter.add_image`` converts the pixels to float and back, then has Pillow try five
    filters on every row: 45 ms for an attention map, against 8 ms here for a file a little
    smaller (a figure's flat colours compress well unfiltered). The size matters too: TensorBoard
    checksums each event in pure Python without TensorFlow, about 12 ms per 70 kB.
    """
    height, width, channels = rgb.shape
    rows = np.zeros((height, 1 + width * channels), dtype=np.uint8)  # a 0 (no filter) per row
    rows[:, 1:] = rgb.reshape(height, -1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits, RGB, no interlace
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows, 3)) + chunk(b"IEND", b""))


def add_rgb_image(writer, tag: str, rgb: np.ndarray, step: int) -> None:
    """``writer.add_image(tag, rgb, step, dataformats="HWC")``, encoded by ``png``."""
    from tensorboard.compat.proto.summary_pb2 import Summary  # TensorBoard: only once a map is logged
    from torch.utils.tensorboard import SummaryWriter

    if not isinstance(writer, SummaryWriter):  # e.g. tensorboardX's, with its own protobufs
        writer.add_image(tag, rgb, step, dataformats="HWC")
        return
    height, width, channels = rgb.shape
    image = Summary.Image(height=height, width=width, colorspace=channels, encoded_image_string=png(rgb))
    # what add_image does with its Summary; _get_file_writer reopens a closed writer as it does
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)


def record_in_run_folder(trainer, text: str) -> None:
    """Record the text a view is drawn on in the run folder (the TensorBoard logger's ``save_dir``), where the
    tinylm tab opens the run on it (``tinylm.tasks.probe_text``)."""
    from lightning.pytorch.loggers import TensorBoardLogger

    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            record_probe(logger.save_dir, text)


WEIGHTS_TAG = "tinylm/probe_attention"  # the raw weights' tag; plugin name "tinylm" (tinylm.explorer reads it)


def weights_summary(weights: list[torch.Tensor], tokens: list[str]):
    """A tensor summary of the probe's attention weights, per layer (h, T, T): one float16 tensor
    (L, h, T, T) under ``WEIGHTS_TAG``, the probe's tokens (each token's own text) as JSON in its
    metadata; a ``data_class`` of tensor, so that TensorBoard's data server keeps it."""
    from tensorboard.compat.proto.summary_pb2 import DATA_CLASS_TENSOR, Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.compat.proto.types_pb2 import DT_HALF

    array = torch.stack(weights).numpy().astype("<f2")  # (L, h, T, T)
    tensor = TensorProto(dtype=DT_HALF, tensor_content=array.tobytes(),
                         tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=n) for n in array.shape]))
    plugin = SummaryMetadata.PluginData(plugin_name="tinylm", content=json.dumps({"tokens": tokens}).encode())
    metadata = SummaryMetadata(plugin_data=plugin, data_class=DATA_CLASS_TENSOR)
    return Summary(value=[Summary.Value(tag=WEIGHTS_TAG, metadata=metadata, tensor=tensor)])


class AttentionInspector(PeriodicInspector):
    """A view of the model's attention: a model without attention (the LSTM/GRU baseline) is skipped,
    said once. One callback list serves every model of a task."""

    def __init__(self, every_n_steps: int | None):
        super().__init__(every_n_steps)
        self._warned_no_attention = False

    def has_attention(self, trainer, module) -> bool:
        if module.model.has_attention:
            return True
        if trainer.is_global_zero and not self._warned_no_attention:
            log.warning("%s: the %s model has no attention to draw; skipped for this run",
                        type(self).__name__, module.model.config.arch)
            self._warned_no_attention = True
        return False

    def run(self, trainer, module) -> None:
        if self.has_attention(trainer, module):
            super().run(trainer, module)
