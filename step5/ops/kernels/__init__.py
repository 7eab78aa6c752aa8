"""The Triton source of the Step5 kernels, one module per update path, and nothing else.

A ``@triton.jit`` function's starting line is part of its Triton cache key, so these
modules hold only Triton code: their tops import ``triton``, ``triton.language`` and the
shared helpers (``summary_math``), and the host code that declares and launches each
kernel lives in ``step5.ops`` (``decode``, ``prefill``, ``prefill_fused``, ``verify``),
where editing it moves no kernel. ``tests/cache_keys.json`` pins the keys.
"""
