"""The partial-state store under the interpreter against the reference: bit-exact.

The store only moves float32 values and adds two of them, so the kernel and the
reference must agree on every bit, including bits they must not touch: the whole
backing tensor of the cache is poisoned first and compared afterwards.
"""

from __future__ import annotations

import random

import pytest
import torch
from dsv4_helpers import on_cpu, projection_views, same_bits, strided_cache

from deepseek_v4 import SavePartialStatesKernel, save_partial_states
from deepseek_v4.reference import save_partial_states_ref
from jitkern import TritonJitKernel, targets


def _case(tokens, head_size, state_width, ratio, block_size, blocks, *, index_dtype=torch.int64, pad_frac=0.25,
          extra_rows=1, extra_cols=3):
    """Random inputs: strided views, a strided cache, distinct slots with padding."""
    kv, score = projection_views(tokens, head_size, pad=5)
    ape_full = torch.randn(ratio, head_size + 7)
    ape = ape_full[:, :head_size]  # row stride != H
    positions = torch.randint(0, 100_000, (tokens,), dtype=index_dtype)
    slots = torch.randperm(blocks * block_size)[:tokens]
    slots[torch.rand(tokens) < pad_frac] = -1
    cache, full = strided_cache(blocks, block_size, state_width + head_size, extra_rows, extra_cols)
    return dict(kv=kv, score=score, ape=ape, positions=positions, state_cache=cache,
                slot_mapping=slots.to(index_dtype), block_size=block_size, state_width=state_width,
                compress_ratio=ratio), full


def _check_against_reference(inputs, full):
    expected_full = full.clone()
    expected = expected_full[:, : inputs["block_size"], : inputs["state_cache"].shape[2]]
    save_partial_states_ref(**{**inputs, "state_cache": expected})
    save_partial_states(**inputs)
    assert same_bits(full, expected_full), "cache differs from the reference (written or untouched bytes)"


@pytest.mark.parametrize(
    "ratio,head_dim",
    [(4, 8), (4, 24), (4, 20), (128, 32), (128, 40), (128, 96), (128, 17)],
    ids=lambda v: str(v),
)
def test_store_matches_reference_bit_exact(ratio, head_dim):
    """The spec's layouts (H = W = 2*head_dim at ratio 4, head_dim at 128), odd sizes."""
    width = 2 * head_dim if ratio == 4 else head_dim
    block_size = 4 if ratio == 4 else 8
    tokens = random.randint(20, 40)
    index_dtype = random.choice([torch.int32, torch.int64])
    inputs, full = _case(tokens, width, width, ratio, block_size, blocks=tokens // block_size + 3,
                         index_dtype=index_dtype)
    _check_against_reference(inputs, full)


def test_store_generic_widths_and_block_sizes():
    """H narrower than state_width, a block size off the spec's table, int32/int64 mixed."""
    inputs, full = _case(33, 12, 20, 4, 16, blocks=4, index_dtype=torch.int32)
    inputs["positions"] = inputs["positions"].long()
    _check_against_reference(inputs, full)


def test_store_deployment_shape():
    """Head 512 at ratio 4: H = 1024, aligned views of a [tokens, 2H] projection."""
    inputs, full = _case(6, 1024, 1024, 4, 4, blocks=4, extra_rows=0, extra_cols=0)
    _check_against_reference(inputs, full)


@pytest.mark.parametrize("tokens", [1, 2])
def test_store_single_tokens_and_all_padding(tokens):
    inputs, full = _case(tokens, 16, 16, 128, 8, blocks=2, pad_frac=0.0)
    _check_against_reference(inputs, full)
    inputs, full = _case(tokens, 16, 16, 128, 8, blocks=2, pad_frac=1.0)
    before = full.clone()
    save_partial_states(**inputs)
    assert same_bits(full, before), "a padding token wrote to the cache"


def test_store_zero_tokens_launches_nothing(monkeypatch):
    monkeypatch.setattr(TritonJitKernel, "launch", lambda *a: pytest.fail("launched for zero tokens"))
    inputs, _ = _case(0, 16, 16, 128, 8, blocks=2)
    save_partial_states(**inputs)


def test_pdl_is_in_the_key_and_runs_under_the_interpreter():
    """PDL is dropped where unsupported (here: the CPU); the kernel class honours it."""
    inputs, full = _case(9, 16, 16, 4, 4, blocks=4)
    kernel = SavePartialStatesKernel()
    with_pdl = kernel.launch_spec(**inputs, launch_pdl=True)
    without = kernel.launch_spec(**inputs)
    assert with_pdl.key.launch_pdl and not without.key.launch_pdl
    # launched with PDL only where the target has it (not the interpreter, sm_80, AMD, portable paths)
    assert kernel.triton_kwargs(with_pdl)["launch_pdl"] is targets.current().pdl
    expected_full = full.clone()
    save_partial_states_ref(**{**inputs, "state_cache": expected_full[:, :4, :32]})
    kernel(**inputs, launch_pdl=True)  # launch options must not break the interpreter
    assert same_bits(full, expected_full)

    launched = []
    original = TritonJitKernel.launch
    try:
        TritonJitKernel.launch = lambda self, spec: launched.append(spec.key)
        save_partial_states(**inputs, pdl_kwargs={"launch_pdl": True})
    finally:
        TritonJitKernel.launch = original
    supported = not on_cpu() and torch.cuda.get_device_capability()[0] >= 9
    assert launched and launched[0].launch_pdl == supported, "PDL is used exactly where the GPU supports it"
    with pytest.raises(ValueError, match="pdl_kwargs"):
        save_partial_states(**inputs, pdl_kwargs={"launch_pdll": True})


HOST_VALUES = pytest.mark.skipif(not on_cpu(), reason="value checks would synchronise a GPU: CPU only")


def _bad(inputs, **changes):
    return {**inputs, **changes}


@pytest.mark.parametrize(
    "change,argument",
    [
        (lambda i: dict(state_cache=i["state_cache"].double()), "state_cache"),
        (lambda i: dict(positions=i["positions"].float()), "positions"),
        (lambda i: dict(slot_mapping=i["slot_mapping"].float()), "slot_mapping"),
        (lambda i: dict(kv=i["kv"].half()), "kv"),
        (lambda i: dict(state_cache=i["state_cache"][:, :, :-1]), "state_cache"),
        (lambda i: dict(score=i["score"][:, :-1]), "score"),
        (lambda i: dict(state_width=i["state_width"] - 1), "state_width"),
        (lambda i: dict(compress_ratio=8), "compress_ratio"),
        (lambda i: dict(ape=i["ape"][:2]), "ape"),
        (lambda i: dict(positions=i["positions"][:-1]), "positions"),
        (lambda i: dict(block_size=3), "state_cache"),
        pytest.param(lambda i: dict(slot_mapping=i["slot_mapping"] + 10_000), "slot_mapping", marks=HOST_VALUES),
        pytest.param(lambda i: dict(positions=-i["positions"] - 1), "positions", marks=HOST_VALUES),
        (lambda i: dict(kv=i["kv"][:, ::2]), "kv"),
    ],
)
def test_wrong_inputs_raise_before_any_launch(monkeypatch, change, argument):
    inputs, _ = _case(8, 16, 16, 4, 4, blocks=4)
    monkeypatch.setattr(TritonJitKernel, "launch", lambda *a: pytest.fail("launched despite a bad input"))
    with pytest.raises(ValueError, match=argument):
        save_partial_states(**_bad(inputs, **change(inputs)))


@HOST_VALUES
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_slot_mapping_out_of_range_is_refused_with_its_message(monkeypatch, index_dtype):
    """Past the cache (one past its end, far past, 2**31 wrapping nothing) or negative
    other than -1: the one message, whatever the position and dtype."""
    inputs, _ = _case(8, 16, 16, 4, 4, blocks=4, index_dtype=index_dtype)
    monkeypatch.setattr(TritonJitKernel, "launch", lambda *a: pytest.fail("launched despite a bad input"))
    slots = inputs["state_cache"].shape[0] * inputs["block_size"]
    large = 2**31 - 1 if index_dtype == torch.int32 else 2**40
    for value in (slots, large, random.randint(-(2**31), -2)):
        slot_mapping, at = inputs["slot_mapping"].clone(), random.randrange(8)
        slot_mapping[at] = value
        with pytest.raises(ValueError) as refused:
            save_partial_states(**_bad(inputs, slot_mapping=slot_mapping))
        assert str(refused.value) == (f"slot_mapping: slot_mapping[{at}] = {value}; expected -1 (padding) or in "
                                      f"[0, {slots}) (the cache's slots)")


def test_warmup_keys_follow_the_spec_table():
    kernel = SavePartialStatesKernel()
    for config, refused in (({"head_dim": 0, "compress_ratio": 4}, "head_dim"),
                            ({"head_dim": -8, "compress_ratio": 128}, "head_dim"),
                            ({"head_dim": 512, "compress_ratio": 16}, "compress_ratio")):
        with pytest.raises(ValueError, match=f"^{refused}: .* not supported"):
            kernel.get_warmup_keys(**config)
    ratio4 = kernel.get_warmup_keys(head_dim=512, compress_ratio=4)
    ratio128 = kernel.get_warmup_keys(head_dim=512, compress_ratio=128)
    assert {(k.head_size, k.state_width, k.block_size) for k in ratio4} == {(1024, 1024, 4)}
    assert {(k.head_size, k.state_width, k.block_size) for k in ratio128} == {(512, 512, 8)}
    assert {(k.positions_dtype, k.slot_mapping_dtype) for k in ratio4} == {
        (p, s) for p in ("int32", "int64") for s in ("int32", "int64")
    }
    assert all(k.launch_pdl for k in kernel.get_warmup_keys(head_dim=128, compress_ratio=4, launch_pdl=True))
    for key in ratio4 + ratio128 + kernel.get_warmup_keys(head_dim=128, compress_ratio=4, launch_pdl=True):
        kernel.compile(key)  # under the interpreter: checks warmup_inputs dispatches to key


def test_a_binary_is_named_by_what_triton_specialises_on():
    """Index dtypes (the compile key); alignment of a view at an odd column and stride
    classes (the layout jitkern derives)."""
    kernel = SavePartialStatesKernel()
    inputs, _ = _case(4, 16, 16, 4, 4, blocks=2)
    base = kernel.layouts.binary_key(kernel.launch_spec(**inputs))
    variants = [
        dict(positions=inputs["positions"].int()),
        dict(slot_mapping=inputs["slot_mapping"].int()),
        dict(score=torch.randn(4, 40)[:, 1:17]),  # 4-byte offset: not 16-byte aligned
        dict(kv=torch.randn(4, 16)),  # row stride 16 (divisible) instead of 37
    ]
    binaries = [kernel.layouts.binary_key(kernel.launch_spec(**{**inputs, **variant})) for variant in variants]
    assert len({base, *binaries}) == 1 + len(variants)
    assert binaries[2].key == base.key and "Score_ptr" in binaries[2].layout
    # Another stride of the same Triton class shares the binary.
    same_class = dict(kv=torch.randn(4, 80)[:, :16])  # 2*16+5=37 -> 17; 80 % 16 == 0 -> 16: differs
    assert kernel.layouts.binary_key(kernel.launch_spec(**{**inputs, **same_class})) != base
    odd = dict(kv=torch.randn(4, 41)[:, :16])  # 41: same class as 37
    assert kernel.layouts.binary_key(kernel.launch_spec(**{**inputs, **odd})) == base
