"""The window compressor under the interpreter against the paged reference.

The cache is poisoned with NaN except the rows of the requests' positions, so a kernel
that reads a wrong row (a wrong block, the wrong half, a position below 0) produces NaN.
Output rows of tokens that close no window must keep their poison bit for bit.
"""

from __future__ import annotations

import random

import pytest
import torch
from dsv4_helpers import assert_rel_close, on_cpu, poison, same_bits

from deepseek_v4 import CompressWindowsKernel, compress_windows
from deepseek_v4.common import RATIOS
from deepseek_v4.reference import compress_windows_ref
from jitkern import TritonJitKernel


def _paged_case(ratio, head_dim, *, requests=3, max_len=None, block_size=None, index_dtype=torch.int64,
                tokens=24, extra_blocks=5, spread=1.0):
    """A cache holding ``requests`` requests' rows in shuffled blocks, and a batch of
    tokens at random positions of random requests, about a third of them closing windows."""
    geometry = RATIOS[ratio]
    block_size = block_size or geometry.block_size
    width = geometry.state_width(head_dim)
    max_len = max_len or 3 * ratio
    lengths = [random.randint(ratio, max_len) for _ in range(requests)]
    max_blocks = -(-max_len // block_size) + random.randint(0, 2)
    needed = sum(-(-n // block_size) for n in lengths)
    blocks = torch.randperm(needed + extra_blocks).int()
    cache_full = poison((needed + extra_blocks, block_size + 1, 2 * width + 3))
    cache = cache_full[:, :block_size, : 2 * width]  # dims 0 and 1 strided
    block_table = torch.full((requests, max_blocks), -1, dtype=torch.int32)
    taken = 0
    for r, length in enumerate(lengths):
        count = -(-length // block_size)
        block_table[r, :count] = blocks[taken : taken + count]
        taken += count
        q = torch.arange(length)
        rows = block_table[r, q // block_size].long()
        cache[rows, q % block_size] = torch.randn(length, 2 * width) * spread
    req_indices, positions = [], []
    for t in range(tokens):
        r = random.randrange(requests)
        if t == 0 or random.random() < 0.4:  # closing
            p = random.randrange(ratio - 1, lengths[r], ratio)
        else:
            p = random.randrange(lengths[r])
        req_indices.append(r)
        positions.append(p)
    if ratio == 4:  # the first window: its previous rows are below position 0
        req_indices.append(0)
        positions.append(3)
    tokens = len(positions)
    out_full = poison((tokens, head_dim + 6))
    return dict(
        state_cache=cache,
        block_table=block_table,
        positions=torch.tensor(positions, dtype=index_dtype),
        req_indices=torch.tensor(req_indices, dtype=random.choice([torch.int32, torch.int64])),
        out=out_full[:, :head_dim],
        compress_ratio=ratio,
        head_dim=head_dim,
        block_size=block_size,
    ), out_full


def _check(inputs, out_full):
    expected_full = out_full.clone()
    compress_windows_ref(**{**inputs, "out": expected_full[:, : inputs["head_dim"]]})
    compress_windows(**inputs)
    closing = (inputs["positions"] + 1) % inputs["compress_ratio"] == 0
    assert closing.any()
    assert_rel_close(out_full[closing, : inputs["head_dim"]], expected_full[closing, : inputs["head_dim"]], "windows")
    assert same_bits(out_full[~closing], expected_full[~closing]), "a token closing no window was written"
    assert same_bits(out_full[:, inputs["head_dim"] :], expected_full[:, inputs["head_dim"] :]), "wrote past head_dim"


@pytest.mark.parametrize("head_dim", [8, 12, 20])
def test_ratio4_matches_reference(head_dim):
    inputs, out = _paged_case(4, head_dim, index_dtype=random.choice([torch.int32, torch.int64]), tokens=30)
    _check(inputs, out)


@pytest.mark.parametrize("head_dim", [16, 24, 80])
def test_ratio128_matches_reference(head_dim):
    """80 = one full chunk of 64 columns and a masked one: the head loop."""
    inputs, out = _paged_case(128, head_dim, requests=2, max_len=300, tokens=6)
    _check(inputs, out)


def test_softmax_is_stable_for_large_scores():
    """Scores of +-80: exp overflows in float32 without subtracting the per-dim max."""
    inputs, out = _paged_case(4, 12, spread=40.0, tokens=20)
    _check(inputs, out)


def test_other_block_size():
    inputs, out = _paged_case(4, 8, block_size=16, tokens=20)
    _check(inputs, out)


def test_overlap_weighs_first_and_second_halves_by_hand():
    """Equal scores: the entry is the plain mean of the rows the spec names, here
    written out by hand (ratio 4, head 1, one block per 4 positions)."""
    kv = torch.arange(8.0)[:, None] * 10 + torch.tensor([1.0, 2.0])  # kv of position q: [10q+1, 10q+2]
    cache = torch.zeros(2, 4, 4)  # rows [kv (2) | score (2)]
    cache[:, :, :2] = kv.view(2, 4, 2)
    out = poison((2, 1))
    compress_windows(cache, torch.tensor([[0, 1]], dtype=torch.int32), torch.tensor([3, 7]),
                     torch.tensor([0, 0]), out, compress_ratio=4, head_dim=1, block_size=4)
    first = (2 + 12 + 22 + 32) / 4  # p=3: second halves of 0..3; positions -4..-1 weigh nothing
    second = ((1 + 11 + 21 + 31) + (42 + 52 + 62 + 72)) / 8  # p=7: first halves of 0..3, second of 4..7
    torch.testing.assert_close(out[:, 0], torch.tensor([first, second]))


def test_zero_tokens_launch_nothing(monkeypatch):
    inputs, _ = _paged_case(4, 8)
    monkeypatch.setattr(TritonJitKernel, "launch", lambda *a: pytest.fail("launched for zero tokens"))
    compress_windows(**{**inputs, "positions": inputs["positions"][:0], "req_indices": inputs["req_indices"][:0],
                        "out": inputs["out"][:0]})


HOST_VALUES = pytest.mark.skipif(not on_cpu(), reason="value checks would synchronise a GPU: CPU only")


def _last_closing(inputs) -> int:
    positions = inputs["positions"]
    return int(positions[(positions + 1) % inputs["compress_ratio"] == 0].max())


@pytest.mark.parametrize(
    "change,argument",
    [
        (lambda i: dict(state_cache=i["state_cache"].double()), "state_cache"),
        (lambda i: dict(out=i["out"].double()), "out"),
        (lambda i: dict(positions=i["positions"].float()), "positions"),
        (lambda i: dict(req_indices=i["req_indices"].float()), "req_indices"),
        (lambda i: dict(block_table=i["block_table"].long()), "block_table"),
        (lambda i: dict(state_cache=i["state_cache"][:, :, :-1]), "state_cache"),
        (lambda i: dict(compress_ratio=16), "compress_ratio"),
        (lambda i: dict(head_dim=0), "head_dim"),
        (lambda i: dict(head_dim=i["head_dim"] + 1), "state_cache"),
        (lambda i: dict(out=i["out"][:, :-1]), "out"),
        (lambda i: dict(block_size=2), "state_cache"),
        pytest.param(lambda i: dict(block_table=i["block_table"][:, : _last_closing(i) // 4]), "block_table",
                     marks=HOST_VALUES),
        (lambda i: dict(max_position=10**6), "block_table"),
        pytest.param(lambda i: dict(req_indices=i["req_indices"] + 10), "req_indices", marks=HOST_VALUES),
        (lambda i: dict(positions=i["positions"][:-1]), "req_indices"),
    ],
)
def test_wrong_inputs_raise_before_any_launch(monkeypatch, change, argument):
    inputs, _ = _paged_case(4, 8)
    monkeypatch.setattr(TritonJitKernel, "launch", lambda *a: pytest.fail("launched despite a bad input"))
    with pytest.raises(ValueError, match=argument):
        compress_windows(**{**inputs, **change(inputs)})


def test_warmup_keys_follow_the_spec_table():
    kernel = CompressWindowsKernel()
    with pytest.raises(ValueError, match=r"^head_dim: \[0\] not supported"):
        kernel.get_warmup_keys(head_dim=0, compress_ratio=4)
    with pytest.raises(ValueError, match=r"^compress_ratio: \[64\] not supported; use \[4, 128\]"):
        kernel.get_warmup_keys(head_dim=128, compress_ratio=64)
    with pytest.raises(ValueError, match=r"^index_dtypes: \['int16'\] not supported"):
        kernel.get_warmup_keys(head_dim=128, compress_ratio=4, index_dtypes=["int32", "int16"])
    for ratio, block_size in ((4, 4), (128, 8)):
        keys = kernel.get_warmup_keys(head_dim=512, compress_ratio=ratio, launch_pdl=True)
        assert {(k.head_dim, k.block_size, k.launch_pdl) for k in keys} == {(512, block_size, True)}
        assert len(keys) == 4  # positions x req_indices dtypes
        binaries = kernel.layouts.binary_keys(keys)
        assert len(binaries) == 4 * 3  # x the classes of a block table's row stride: 1, 16k, other
        assert {binary.layout for binary in binaries} == {"", "block_table_row_stride:1", "block_table_row_stride:i32"}
        for binary in binaries:
            kernel.compile(binary)  # under the interpreter: checks the stand-ins of each layout


def test_pdl_runs_under_the_interpreter():
    inputs, out = _paged_case(4, 8)
    expected = out.clone()
    compress_windows_ref(**{**inputs, "out": expected[:, :8]})
    spec = CompressWindowsKernel().launch_spec(**inputs, launch_pdl=True)
    assert spec.key.launch_pdl
    CompressWindowsKernel()(**inputs, launch_pdl=True)
    closing = (inputs["positions"] + 1) % 4 == 0
    assert_rel_close(out[closing, :8], expected[closing, :8])


# --- ratio 128: programs scan chunks of tokens ----------------------------------------------

@pytest.mark.parametrize("min_programs", [1, 40])
@pytest.mark.parametrize("head_dim", [16, 80])
def test_ratio128_chunks_with_many_window_ends(monkeypatch, min_programs, head_dim):
    """A program scans up to 128 tokens and handles every window end among them in turn:
    many ends per chunk, chunks of different lengths, several column groups (80 = 64 + 16)."""
    from deepseek_v4 import tiling

    monkeypatch.setattr(tiling, "MIN_PROGRAMS", min_programs)
    inputs, out = _paged_case(128, head_dim, requests=3, max_len=400, tokens=150,
                              index_dtype=random.choice([torch.int32, torch.int64]))
    spec = CompressWindowsKernel().launch_spec(**inputs)
    tokens, n_chunks = inputs["positions"].shape[0], spec.kwargs["n_chunks"]
    assert n_chunks % 2 == 1 and n_chunks * 128 >= tokens
    assert n_chunks == 3 if min_programs == 1 else 3 < n_chunks < tokens
    assert spec.grid == (n_chunks * -(-head_dim // spec.key.program_d),)
    _check(inputs, out)


def test_ratio128_prefill_gives_each_program_one_window(monkeypatch):
    """Requests' consecutive positions, as a prefill sends them: any 128 consecutive
    tokens of a request hold one window end, wherever the chunks start."""
    from deepseek_v4 import tiling

    monkeypatch.setattr(tiling, "MIN_PROGRAMS", 1)
    ratio, head_dim, block_size = 128, 24, 8
    lengths = [300, 517, 129]
    width = head_dim
    max_blocks = -(-max(lengths) // block_size)
    cache = poison((len(lengths) * max_blocks + 3, block_size, 2 * width))
    block_table = torch.randperm(len(lengths) * max_blocks).int().view(len(lengths), max_blocks)
    positions, req_indices = [], []
    for r, length in enumerate(lengths):
        q = torch.arange(length)
        cache[block_table[r, q // block_size].long(), q % block_size] = torch.randn(length, 2 * width)
        start = random.randrange(0, 40)  # an earlier chunk of this request ran in an earlier step
        positions += range(start, length)
        req_indices += [r] * (length - start)
    out = poison((len(positions), head_dim))
    inputs = dict(state_cache=cache, block_table=block_table, positions=torch.tensor(positions),
                  req_indices=torch.tensor(req_indices, dtype=torch.int32), out=out, compress_ratio=ratio,
                  head_dim=head_dim, block_size=block_size)
    _check(inputs, out)


def test_ratio128_launches_far_fewer_programs_than_tokens():
    """64K prefill tokens: a program per 128 tokens and 64 columns, not one per token."""
    tokens, head_dim = 65536, 512
    inputs = dict(state_cache=torch.empty(1, 8, 2 * head_dim), block_table=torch.zeros(16, 512, dtype=torch.int32),
                  positions=torch.zeros(tokens, dtype=torch.int32), req_indices=torch.zeros(tokens, dtype=torch.int32),
                  out=torch.empty(tokens, head_dim), compress_ratio=128, head_dim=head_dim, block_size=8)
    spec = CompressWindowsKernel().launch_spec(**inputs)
    assert spec.kwargs["n_chunks"] == tokens // 128 + 1  # odd
    assert spec.grid == ((tokens // 128 + 1) * head_dim // spec.key.program_d,)
    small = CompressWindowsKernel().launch_spec(**{**inputs, "positions": inputs["positions"][:64],
                                                   "req_indices": inputs["req_indices"][:64], "out": inputs["out"][:64]})
    assert small.kwargs["n_chunks"] == 64  # a decode batch: a program per token
    ratio4 = CompressWindowsKernel().launch_spec(**{**inputs, "compress_ratio": 4, "block_size": 4,
                                                    "state_cache": torch.empty(1, 4, 4 * head_dim)})
    assert ratio4.grid == (tokens,)


def test_ratio128_window_ends_of_a_prefill_or_of_lockstep_decodes_fall_in_different_chunks():
    """Chunks take every n_chunks-th token, n_chunks odd: window ends 128 tokens apart
    (a prefill) and runs of consecutive tokens (decodes) land in different programs."""
    from deepseek_v4.tiling import chunk_count, chunk_size

    tokens = 65536
    n_chunks = chunk_count(tokens, chunk_size(tokens, 512, 128, 64))
    ends = torch.arange(127, tokens, 128)  # requests of 4096 tokens from position 0
    assert len(set((ends % n_chunks).tolist())) == len(ends)
    decodes = torch.arange(5000, 5000 + 300)
    assert len(set((decodes % n_chunks).tolist())) == len(decodes)
