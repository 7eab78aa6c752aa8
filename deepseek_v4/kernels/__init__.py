"""The Triton source of the DeepSeek V4 kernels, one module per kernel, and nothing else: a
``@triton.jit`` function's starting line is part of its Triton cache key, so the host code
that declares and launches each kernel lives in ``deepseek_v4``, where editing it moves no
kernel (``tests/cache_keys.json`` pins the keys)."""
