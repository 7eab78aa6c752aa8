"""DeepSeek V4 compressor states: the partial-state store and the window compressor.

``docs/spec/deepseek-v4-compressor.md`` gives the semantics; ``reference.py`` is the PyTorch
reference of both, for tests and benchmarks only.
"""

from deepseek_v4.compressor import CompressWindowsKernel, compress_windows
from deepseek_v4.save_partial_states import SavePartialStatesKernel, save_partial_states

__all__ = ["CompressWindowsKernel", "SavePartialStatesKernel", "compress_windows", "save_partial_states"]
