"""The DeepSeek V4 public functions as torch ops (``torch.ops.deepseek_v4.*``): torch's
``opcheck`` of each (the store writes ``state_cache``, the compressor ``out``, the fused
step both), ``pdl_kwargs`` carried through the graph, and a decode step compiled with
``fullgraph=True`` and a dynamic token dimension, which writes the bytes the eager step
writes. Kernels run under the default mode's interpreter (on CUDA tensors in the GPU mode)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from dsv4_helpers import same_bits

from deepseek_v4 import compress_windows, decode_step, save_partial_states
from jitkern.testing import check_op, op_call

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks.launch_samples: a decode step's inputs
from benchmarks.launch_samples import dsv4_decode  # noqa: E402

PDL = {"launch_pdl": True}  # dropped where the device has no PDL (here), as in an eager call


def decode_inputs(tokens: int, compress_ratio: int):
    """(store, compress, fused) arguments of a decode step of ``tokens`` requests, head 128."""
    store, compress = dsv4_decode(torch.get_default_device().type, head_dim=128, compress_ratio=compress_ratio,
                                  batch=tokens)
    kv, score, ape, positions, state_cache, slots, block_size, width, _ = store
    _, block_table, _, requests, out, _, head_dim, _ = compress
    fused = (kv, score, ape, positions, state_cache, slots, block_table, requests, out, compress_ratio, head_dim,
             block_size, width)
    return store, compress, fused


def test_each_op_writes_what_its_function_writes():
    writes = {name: [argument.name for argument in getattr(torch.ops.deepseek_v4, name).default._schema.arguments
                     if argument.is_write] for name in ("save_partial_states", "compress_windows", "decode_step")}
    assert writes == {"save_partial_states": ["state_cache"], "compress_windows": ["out"],
                      "decode_step": ["state_cache", "out"]}


@pytest.mark.parametrize("compress_ratio", [4, 128])
def test_opcheck_of_every_deepseek_v4_op(compress_ratio):
    store, compress, fused = decode_inputs(4, compress_ratio)
    check_op(save_partial_states, *store, pdl_kwargs=PDL)
    check_op(compress_windows, *compress)
    check_op(decode_step, *fused)


def test_pdl_kwargs_travel_as_their_repr():
    store, _, _ = decode_inputs(2, 4)
    _overload, (arguments, _) = op_call(save_partial_states, *store, pdl_kwargs=PDL)
    assert arguments[-1] == "{'launch_pdl': True}"
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError,  # the function's own error, raised while tracing
                       match="pdl_kwargs: expected {'launch_pdl': True or False}, or None, got {'launch_pdl': 'yes'}"):
        torch.compile(lambda *a: save_partial_states(*a, pdl_kwargs={"launch_pdl": "yes"}), fullgraph=True,
                      backend="aot_eager")(*store)


def test_a_compiled_decode_step_of_any_batch_writes_what_the_eager_one_writes():
    """The store then the compressor, and the fused step, on requests' token slices of one
    cache: compiled once for every batch (the token dimension dynamic), the same bits."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def step(store, compress, fused):
        save_partial_states(*store, pdl_kwargs=PDL)
        compress_windows(*compress)
        return decode_step(*fused)

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(step, fullgraph=True, backend=counter)
    store, compress, fused = decode_inputs(6, 4)
    tokens_of = {0, 1, 3, 5}, {2, 3, 4}, {0, 1, 3, 5, 7, 8}  # per call, the arguments with a token dimension
    for tokens in (3, 4, 6):
        runs = []
        for dynamic in (False, True):
            arguments = [[value.clone()[:tokens] if i in token_args else value.clone() if torch.is_tensor(value)
                          else value for i, value in enumerate(call)] for call, token_args in
                         zip((store, compress, fused), tokens_of)]
            arguments[1][0] = arguments[2][4] = arguments[0][4]  # one state cache
            for call, token_args in zip(arguments, tokens_of):
                for i in token_args if dynamic else ():
                    torch._dynamo.mark_dynamic(call[i], 0)
            result = (compiled if dynamic else step)(*arguments)
            runs.append((result, arguments[0][4], arguments[1][4]))
        for eager, traced in zip(*runs):
            assert same_bits(eager, traced), f"{tokens} tokens"
    assert counter.frame_count == 1
