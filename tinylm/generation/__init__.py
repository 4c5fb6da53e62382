"""Generation, shared by every task: ``sampling`` (the one sampling loop, PyTorch) and ``prompting`` (its text
side, free of torch, shared with ONNX Runtime)."""
