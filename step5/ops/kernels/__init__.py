"""The Triton source of the Step5 kernels, one module per update path, and nothing else: a
``@triton.jit`` function's starting line is part of its Triton cache key, so the host code
that declares and launches each kernel lives in ``step5.ops``, where editing it moves no
kernel (``tests/cache_keys.json`` pins the keys)."""
