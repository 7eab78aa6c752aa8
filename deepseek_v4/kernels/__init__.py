"""The Triton source of the DeepSeek V4 kernels, one module per kernel, and nothing else.

A ``@triton.jit`` function's starting line is part of its Triton cache key, so these
modules hold only Triton code: their tops import ``triton``, ``triton.language`` and the
window helpers (``compressor``), and the host code that declares and launches each kernel
lives in ``deepseek_v4`` (``compressor``, ``decode_step``, ``save_partial_states``), where
editing it moves no kernel. ``tests/cache_keys.json`` pins the keys.
"""
