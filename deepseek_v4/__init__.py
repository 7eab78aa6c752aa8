"""DeepSeek V4 compressor states (``docs/spec/deepseek-v4-compressor.md``): the partial-state
store, the window compressor, and both fused into one launch for decode steps;
``reference.py`` is their PyTorch reference, for tests and benchmarks only."""

from deepseek_v4.compressor import CompressWindowsKernel, compress_windows
from deepseek_v4.decode_step import DecodeStepKernel, decode_step
from deepseek_v4.save_partial_states import SavePartialStatesKernel, save_partial_states

__all__ = ["CompressWindowsKernel", "DecodeStepKernel", "SavePartialStatesKernel", "compress_windows", "decode_step",
           "save_partial_states"]
