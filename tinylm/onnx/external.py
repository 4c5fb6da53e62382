"""Does an ONNX file keep tensors in other files? Read from the protobuf bytes, with no ``onnx`` import.

ONNX "external data" lets a tensor name a file beside the model that ONNX Runtime reads as its
data. tinylm never writes any, and a crafted file could make generation print a file of its
folder, so ``tinylm.onnx.runtime.load_onnx`` refuses every file this finds it in. The runtime-only
install has onnxruntime but not the ``onnx`` package, so the walk reads the wire format itself.
"""

from __future__ import annotations

from collections.abc import Iterator

# Every field of an ONNX file that can hold a TensorProto, by message, with the message it holds
# (field numbers of onnx/onnx.proto): ModelProto.graph, .training_info, .functions; a function's
# nodes and attribute defaults; a graph's nodes, initializers and sparse initializers; an
# attribute's t, g, tensors, graphs, sparse_tensor, sparse_tensors; a sparse tensor's values, indices.
TENSOR_PATHS = {
    "ModelProto": {7: "GraphProto", 20: "TrainingInfoProto", 25: "FunctionProto"},
    "TrainingInfoProto": {1: "GraphProto", 2: "GraphProto"},
    "FunctionProto": {7: "NodeProto", 11: "AttributeProto"},
    "GraphProto": {1: "NodeProto", 5: "TensorProto", 15: "SparseTensorProto"},
    "NodeProto": {5: "AttributeProto"},
    "AttributeProto": {5: "TensorProto", 6: "GraphProto", 10: "TensorProto", 11: "GraphProto",
                       22: "SparseTensorProto", 23: "SparseTensorProto"},
    "SparseTensorProto": {1: "TensorProto", 2: "TensorProto"},
    "TensorProto": {},
}
EXTERNAL_DATA, DATA_LOCATION, EXTERNAL = 13, 14, 1  # TensorProto.external_data, .data_location; DataLocation


def _varint(data: memoryview, i: int) -> tuple[int, int]:
    value = shift = 0
    while i < len(data) and shift < 64:
        value |= (data[i] & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if data[i - 1] < 0x80:
            return value, i
    raise ValueError("a truncated or overlong varint")


def _fields(data: memoryview) -> Iterator[tuple[int, int, memoryview | int | None]]:
    """(field number, wire type, value) of one protobuf message: an int (varint), bytes (length-delimited)."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        value = None
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            length, i = _varint(data, i)
            value, i = data[i : i + length], i + length
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"protobuf wire type {wire}")
        if i > len(data):
            raise ValueError("a field runs past the end of its message")
        yield number, wire, value


def uses_external_data(data: bytes) -> bool:
    """Whether any tensor of the ONNX file ``data`` (in a graph, subgraph, function, attribute,
    sparse tensor or training graph) keeps its data in another file. Read from the protobuf wire
    format directly, so that it needs no ``onnx`` package. Raises ValueError for bytes that are
    not protobuf."""
    stack = [("ModelProto", memoryview(data))]
    while stack:  # a loop, not recursion: nesting depth is the file's to choose
        kind, message = stack.pop()
        for number, wire, value in _fields(message):
            if kind == "TensorProto" and (number == EXTERNAL_DATA or (number, value) == (DATA_LOCATION, EXTERNAL)):
                return True
            if wire == 2 and number in TENSOR_PATHS[kind]:
                stack.append((TENSOR_PATHS[kind][number], value))
    return False
