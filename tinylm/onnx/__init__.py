"""ONNX: exporting a checkpoint, checking the file, and sampling from it without PyTorch."""
