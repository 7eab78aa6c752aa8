"""The fused decode step against its two launches (store, then compressor) and the reference.

Each case is a decode batch: one new token per request, in shuffled order, at positions
that close a window or not (at ratio 4 also the first window, whose previous one lies
below position 0), with the rows of earlier positions already in a strided cache whose
blocks are shuffled, and padding tokens (slot -1) in between. The cache and ``out`` are
poisoned with NaN first. The fused launch must leave every byte of both backing tensors
as the two launches leave them on a copy; the store must equal the reference bit for bit,
and the entries the float64 reference to ``REL_TOL``.

Under the interpreter every store of a launch lands only when the launch ends (the
``stores_land_when_the_launch_ends`` fixture): no read in a launch sees what the launch
wrote, the most a GPU may hide. The fused step must not need its own stores: a window
that read its closing token's row back from the cache would read the poison.
"""

from __future__ import annotations

import os
import random

import pytest
import torch
from dsv4_helpers import assert_rel_close, on_cpu, poison, projection_views, same_bits

from deepseek_v4 import DecodeStepKernel, compress_windows, decode_step, save_partial_states
from deepseek_v4.common import RATIOS
from deepseek_v4.sweeps import decode_step_sweep_launch as sweep_launch
from deepseek_v4.reference import compress_windows_ref, save_partial_states_ref
from jitkern import TritonJitKernel
from jitkern.testing import record_launches


@pytest.fixture(autouse=True)
def stores_land_when_the_launch_ends(monkeypatch):
    """Interpreter only: each ``tl.store`` is queued and written after the launch's last
    program (a GPU launch orders nothing between a store and another thread's read)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    from triton.runtime import interpreter

    queued = []
    store = interpreter._interpreter.store
    launch = interpreter.GridExecutor.__call__

    def queue(self, ptrs, value, mask, cache_modifier, eviction_policy):
        queued.append((ptrs.data.copy(), value.data.copy(), mask.data.copy()))

    def launch_then_store(self, *args, **kwargs):
        try:
            return launch(self, *args, **kwargs)
        finally:
            for ptrs, value, mask in queued:
                store(ptrs, value, mask)
            queued.clear()

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_masked_store", queue)
    monkeypatch.setattr(interpreter.GridExecutor, "__call__", launch_then_store)
    yield


def _position(ratio: int, closing: bool, most: int) -> int:
    """A position below ``most`` (at least ``ratio``) that closes a window or not."""
    if closing:
        return random.randrange(ratio - 1, most, ratio)
    return random.choice([p for p in range(most) if (p + 1) % ratio])


def decode_case(ratio, head_dim, *, requests=7, padding=2, block_size=None, index_dtype=None, spread=1.0,
                most=None):
    """A decode batch and the tensors behind it: ``(args, backing)``, where ``backing``
    holds the full tensors that ``state_cache`` and ``out`` are views of."""
    geometry = RATIOS[ratio]
    bs = block_size or geometry.block_size
    width = geometry.state_width(head_dim)
    most = most or 3 * ratio
    positions = [_position(ratio, random.random() < 0.5, most) for _ in range(requests)]
    positions[0] = ratio - 1  # the first window: at ratio 4 its previous one lies below position 0
    positions[1] = random.randrange(ratio - 1) if ratio == 4 else _position(ratio, False, most)  # closes none
    positions[2] = random.randrange(2 * ratio - 1, most, ratio)  # a window after another (most > 2 * ratio)
    counts = [p // bs + 1 for p in positions]
    blocks = torch.randperm(sum(counts) + 3).int()
    cache_full = poison((len(blocks), bs + 1, 2 * width + 3))
    cache = cache_full[:, :bs, : 2 * width]  # dims 0 and 1 strided
    rows = torch.randperm(requests + 1).tolist()  # block table rows in any order, one unused
    block_table = torch.full((requests + 1, max(counts) + random.randint(0, 2)), -1, dtype=torch.int32)
    taken = 0
    for r, (p, count) in enumerate(zip(positions, counts)):
        block_table[rows[r], :count] = blocks[taken : taken + count]
        taken += count
        q = torch.arange(p)  # earlier steps' rows; this step's row p is still poison
        cache[block_table[rows[r], q // bs].long(), q % bs] = torch.randn(p, 2 * width) * spread

    batch = []  # (position, slot, block table row)
    for r in torch.randperm(requests).tolist():
        p = positions[r]
        batch.append((p, int(block_table[rows[r], p // bs]) * bs + p % bs, rows[r]))
    for k in range(padding):
        r = 2 if k == 0 else random.randrange(requests)
        # a closing position whose window holds earlier rows only (the first one always), or 0
        closing = positions[r] >= ratio and (k == 0 or random.random() < 0.5)
        p = _position(ratio, True, positions[r]) if closing else 0
        batch.insert(random.randint(0, len(batch)), (p, -1, rows[r]))
    tokens = len(batch)
    kv, score = projection_views(tokens, width, pad=5)
    kv.mul_(spread)
    score.mul_(spread)
    dtypes = [index_dtype or random.choice([torch.int32, torch.int64]) for _ in range(3)]
    out_full = poison((tokens, head_dim + 6))
    args = dict(
        kv=kv, score=score, ape=torch.randn(ratio, width + 7)[:, :width],
        positions=torch.tensor([b[0] for b in batch], dtype=dtypes[0]), state_cache=cache,
        slot_mapping=torch.tensor([b[1] for b in batch], dtype=dtypes[1]), block_table=block_table,
        req_indices=torch.tensor([b[2] for b in batch], dtype=dtypes[2]), out=out_full[:, 1 : 1 + head_dim],
        compress_ratio=ratio, head_dim=head_dim, block_size=bs, state_width=width,
    )
    return args, dict(state_cache=cache_full, out=out_full)


def on_copies(args, backing):
    """``args`` with ``state_cache`` and ``out`` the same views of copies of their backing."""
    copies = {name: full.clone() for name, full in backing.items()}
    views = {name: torch.as_strided(copies[name], args[name].shape, args[name].stride(), args[name].storage_offset())
             for name in copies}
    return {**args, **views}, copies


def two_launches(args) -> None:
    """What the fused kernel replaces: the store, then the compressor."""
    save_partial_states(*(args[n] for n in ("kv", "score", "ape", "positions", "state_cache", "slot_mapping",
                                            "block_size", "state_width", "compress_ratio")),
                        pdl_kwargs=args.get("pdl_kwargs"))
    compress_windows(*(args[n] for n in ("state_cache", "block_table", "positions", "req_indices", "out",
                                         "compress_ratio", "head_dim", "block_size")),
                     pdl_kwargs=args.get("pdl_kwargs"), max_position=args.get("max_position"))


def check_against_two_launches(args, backing, fused=None) -> None:
    """``fused(args)`` (default: ``decode_step``) leaves every byte of the backing tensors
    as the store then the compressor leave them on a copy."""
    two, two_backing = on_copies(args, backing)
    two_launches(two)
    (fused or (lambda a: decode_step(**a)))(args)
    assert same_bits(backing["state_cache"], two_backing["state_cache"]), "cache bytes differ from the two launches"
    assert same_bits(backing["out"], two_backing["out"]), "out bytes differ from the two launches"


def check_against_two_launches_and_reference(args, backing, fused=None) -> None:
    ref, ref_backing = on_copies(args, backing)
    check_against_two_launches(args, backing, fused)

    save_partial_states_ref(*(ref[n] for n in ("kv", "score", "ape", "positions", "state_cache", "slot_mapping",
                                               "block_size", "state_width", "compress_ratio")))
    compress_windows_ref(*(ref[n] for n in ("state_cache", "block_table", "positions", "req_indices", "out",
                                            "compress_ratio", "head_dim", "block_size")))
    assert same_bits(backing["state_cache"], ref_backing["state_cache"]), "the store differs from the reference"
    closing = (args["positions"] + 1) % args["compress_ratio"] == 0
    assert closing.any() and (~closing).any()
    assert_rel_close(args["out"][closing], ref["out"][closing], "windows")
    assert same_bits(args["out"][~closing], ref["out"][~closing]), "a token closing no window was written"
    assert same_bits(backing["out"][:, 1 + args["head_dim"]:], ref_backing["out"][:, 1 + args["head_dim"]:])
    assert same_bits(backing["out"][:, 0], ref_backing["out"][:, 0]), "wrote outside out's columns"


@pytest.mark.parametrize("ratio,head_dim", [(4, 8), (4, 20), (128, 16), (128, 80)], ids=lambda v: str(v))
def test_fused_equals_store_then_compress(ratio, head_dim):
    """80 at ratio 128: two column groups of 64, the second masked (the compressor's tiling)."""
    args, backing = decode_case(ratio, head_dim, requests=random.choice([5, 7, 9]), padding=random.randint(1, 3))
    check_against_two_launches_and_reference(args, backing)


@pytest.mark.parametrize("ratio,head_dim", [(4, 512), (128, 512), (4, 128), (128, 128)], ids=lambda v: str(v))
def test_fused_equals_store_then_compress_at_deployment_sizes(ratio, head_dim):
    args, backing = decode_case(ratio, head_dim, requests=3, padding=1, most=2 * ratio + 8)
    check_against_two_launches_and_reference(args, backing)


def test_windows_across_block_boundaries_and_large_scores():
    """Block size 3 (off the spec's table): windows straddle blocks; scores of +-40."""
    args, backing = decode_case(4, 12, block_size=3, spread=40.0, requests=9)
    check_against_two_launches_and_reference(args, backing)


def test_pdl_runs_under_the_interpreter():
    args, backing = decode_case(4, 8)
    spec = DecodeStepKernel().launch_spec(**{k: v for k, v in args.items() if k != "state_width"}, launch_pdl=True)
    assert spec.key.launch_pdl
    check_against_two_launches_and_reference({**args, "pdl_kwargs": {"launch_pdl": True}}, backing)


def test_one_launch_of_a_program_per_token_and_column_group():
    """Small batches: a program per token and 32-column group (80 = 32 + 32 + 16 at ratio 128)."""
    args, _ = decode_case(128, 80, requests=5, padding=2)
    with record_launches(dry_run=True) as launches:
        decode_step(**args)
    (kernel, spec), = launches
    assert kernel.name == "deepseek_v4.decode_step" and spec.grid == (7 * 3,)
    assert spec.kwargs["n_chunks"] == 7
    args, _ = decode_case(4, 20, requests=5, padding=2)
    with record_launches(dry_run=True) as launches:
        decode_step(**args)
    (kernel, spec), = launches
    assert spec.grid == (7,) and spec.key.scan == 1


@pytest.mark.parametrize(
    "ratio,head_dim,batch,programs",
    [(128, 512, 1024, 512), (128, 512, 64, 512), (128, 128, 1024, 512), (128, 128, 64, 256), (128, 512, 1, 16),
     (4, 512, 1024, 2048), (4, 512, 64, 128), (4, 128, 1024, 1024)],
)
def test_programs_of_deployment_batches(ratio, head_dim, batch, programs):
    """Ratio 128 takes chunks of up to 32 tokens, as few as still leave 512 programs (a wave
    of the H200 at 4 programs an SM); ratio 4 a program per token and 256 columns."""
    geometry = RATIOS[ratio]
    width = geometry.state_width(head_dim)
    index = torch.zeros(batch, dtype=torch.int32)
    spec = DecodeStepKernel().launch_spec(
        kv=torch.empty(batch, width), score=torch.empty(batch, width), ape=torch.empty(ratio, width),
        positions=index, state_cache=torch.empty(1, geometry.block_size, 2 * width), slot_mapping=index,
        block_table=torch.zeros(batch, 8, dtype=torch.int32), req_indices=index, out=torch.empty(batch, head_dim),
        compress_ratio=ratio, head_dim=head_dim, block_size=geometry.block_size)
    assert spec.grid == (programs,)
    groups = -(-head_dim // spec.key.program_d)
    assert spec.kwargs["n_chunks"] * groups == programs and spec.kwargs["n_chunks"] * spec.key.scan >= batch


def fused_with(tiling=None, **choices):
    """The fused launch with another tiling or chunk (``sweep_launch``), as a ``fused`` for
    ``check_against_two_launches``."""
    def launch(args):
        inputs = {k: v for k, v in args.items() if k not in ("state_width", "pdl_kwargs", "max_position")}
        sweep_launch(DecodeStepKernel(), inputs, tiling, **choices)
    return launch


@pytest.mark.parametrize("chunk", [2, 4, 8, 32])
@pytest.mark.parametrize("head_dim", [16, 80])
def test_ratio128_chunks_with_several_window_ends(chunk, head_dim):
    """A program takes ``chunk`` tokens (every n_chunks-th): about half of them close a
    window, so most programs handle several windows in turn (each one's table entries read
    while the previous window is); odd batch sizes leave partial chunks; padding between."""
    args, backing = decode_case(128, head_dim, requests=random.choice([11, 13, 17]), padding=random.randint(1, 3))
    check_against_two_launches_and_reference(args, backing, fused_with(chunk=chunk))


def test_ratio128_chunks_with_windows_across_blocks():
    """Block size 5 (off the spec's table): a window's 128 rows start and end mid-block."""
    args, backing = decode_case(128, 24, block_size=5, requests=9, padding=2, spread=40.0)
    check_against_two_launches_and_reference(args, backing, fused_with(chunk=8))


@pytest.mark.skipif(not on_cpu(), reason="on a GPU, sweep_decode_step.py checks them before timing them "
                                         "(here each would compile)")
@pytest.mark.parametrize("ratio,head_dim", [(4, 512), (128, 512), (4, 128), (128, 128)], ids=lambda v: str(v))
def test_every_sweep_tiling_writes_the_bytes_of_store_then_compress(ratio, head_dim):
    """What ``benchmarks/device/sweep_decode_step.py`` times, at deployment sizes (the
    interpreter checks what the tiling moves; the compiled layouts test, how it sums)."""
    from benchmarks.bench_deepseek_v4 import decode_variants

    for variant in decode_variants(head_dim, ratio):
        args, backing = decode_case(ratio, head_dim, requests=5, padding=1, most=2 * ratio + 8)
        check_against_two_launches_and_reference(args, backing, fused_with(**variant))


def _fill_row(args, slot: int) -> None:
    """Random values in the cache row of ``slot`` (which decode_case leaves poisoned when
    this step's token would store it)."""
    bs = args["block_size"]
    args["state_cache"][slot // bs, slot % bs] = torch.randn(args["state_cache"].shape[2])


def _slot_of(args, token: int, q: int) -> int:
    bs = args["block_size"]
    return int(args["block_table"][int(args["req_indices"][token]), q // bs]) * bs + q % bs


@pytest.mark.parametrize("ratio,head_dim", [(4, 8), (4, 20), (128, 16), (128, 80)], ids=lambda v: str(v))
@pytest.mark.parametrize("where", ["elsewhere", "earlier row", "earlier window"])
def test_a_slot_that_is_not_the_tokens_table_row(ratio, head_dim, where):
    """The fused step takes the row the token stores from its inputs wherever its window
    reads that row, and reads the cache elsewhere: a closing token whose slot is not the
    table's row for its position (``elsewhere``: an unused slot, so the window reads the
    cache's row; ``earlier row``: the slot of an earlier row of its window, which the
    compressor then reads as the token's values; at ratio 4 also a row of the previous
    window, read through the first halves) gives the bytes of the two launches."""
    if where == "earlier window" and ratio != 4:
        pytest.skip("only ratio 4 windows read the previous window")
    args, backing = decode_case(ratio, head_dim, requests=7, padding=0)  # no other token reads these rows
    token = next(t for t in range(len(args["positions"])) if int(args["slot_mapping"][t]) >= 0
                 and (int(args["positions"][t]) + 1) % ratio == 0 and int(args["positions"][t]) >= 2 * ratio - 1)
    p = int(args["positions"][token])
    _fill_row(args, _slot_of(args, token, p))  # now read from the cache, where the token does not store
    if where == "elsewhere":
        unused = set(range(args["state_cache"].shape[0])) - set(args["block_table"].flatten().tolist())
        slot = min(unused) * args["block_size"] + args["block_size"] - 1  # decode_case leaves 3 blocks unused
    else:
        slot = _slot_of(args, token, p - 1 if where == "earlier row" else p - ratio - 1)
    args["slot_mapping"][token] = slot
    check_against_two_launches(args, backing)
    if ratio == 128:
        check_against_two_launches(*on_copies(args, backing), fused_with(chunk=4))


def test_zero_tokens_launch_nothing(monkeypatch):
    args, _ = decode_case(4, 8)
    monkeypatch.setattr(TritonJitKernel, "launch", lambda *a: pytest.fail("launched for zero tokens"))
    decode_step(**{**args, **{n: args[n][:0] for n in ("kv", "score", "positions", "slot_mapping", "req_indices",
                                                       "out")}})


HOST_VALUES = pytest.mark.skipif(not on_cpu(), reason="value checks would synchronise a GPU: CPU only")


@pytest.mark.parametrize(
    "change",
    [
        lambda a: dict(kv=a["kv"].half()),
        lambda a: dict(score=a["score"][:, :-1]),
        lambda a: dict(ape=a["ape"][:2]),
        lambda a: dict(positions=a["positions"].float()),
        lambda a: dict(slot_mapping=a["slot_mapping"][:-1]),
        lambda a: dict(state_cache=a["state_cache"].double()),
        lambda a: dict(state_cache=a["state_cache"][:, :, :-1]),
        lambda a: dict(block_table=a["block_table"].long()),
        lambda a: dict(req_indices=a["req_indices"][:-1]),
        lambda a: dict(out=a["out"][:, :-1]),
        lambda a: dict(compress_ratio=16),
        lambda a: dict(head_dim=0),
        lambda a: dict(block_size=2),
        lambda a: dict(max_position=10**6),
        lambda a: dict(pdl_kwargs={"launch_pdll": True}),
        pytest.param(lambda a: dict(slot_mapping=a["slot_mapping"] + 10_000), marks=HOST_VALUES),
        pytest.param(lambda a: dict(req_indices=a["req_indices"] + 10), marks=HOST_VALUES),
        pytest.param(lambda a: dict(block_table=a["block_table"][:, :0]), marks=HOST_VALUES),
    ],
)
def test_wrong_inputs_raise_what_the_two_launches_raise(monkeypatch, change):
    args, _ = decode_case(4, 8)
    bad = {**args, **change(args)}
    with record_launches(dry_run=True), pytest.raises(ValueError) as two:
        two_launches(bad)
    monkeypatch.setattr(TritonJitKernel, "launch", lambda *a: pytest.fail("launched despite a bad input"))
    with pytest.raises(ValueError) as fused:
        decode_step(**bad)
    assert str(fused.value) == str(two.value)


@pytest.mark.parametrize(
    "change,argument",
    [
        (lambda a: dict(state_width=17, state_cache=torch.zeros(a["state_cache"].shape[0], 4, 40)), "state_width"),
        (lambda a: dict(kv=a["kv"][:, :-1], score=a["score"][:, :-1]), "kv"),
    ],
)
def test_what_only_the_fused_kernel_needs_is_checked(monkeypatch, change, argument):
    """The store may write narrower rows than the compressor reads; fused, they must match."""
    args, _ = decode_case(4, 8)
    bad = {**args, **change(args)}
    with record_launches(dry_run=True):
        save_partial_states(*(bad[n] for n in ("kv", "score", "ape", "positions", "state_cache", "slot_mapping",
                                               "block_size", "state_width", "compress_ratio")))
    monkeypatch.setattr(TritonJitKernel, "launch", lambda *a: pytest.fail("launched despite a bad input"))
    with pytest.raises(ValueError, match=f"^{argument}:"):
        decode_step(**bad)


@HOST_VALUES
@pytest.mark.parametrize("who", ["second token of a request", "padding token"])
def test_a_batch_whose_tokens_share_rows_is_refused_on_the_cpu(monkeypatch, who):
    """Another token of the launch storing a row a closing window reads would race with it."""
    args, _ = decode_case(128, 16, requests=3, padding=0)
    closing = int(((args["positions"] + 1) % 128 == 0).nonzero()[0])
    p, r = int(args["positions"][closing]), int(args["req_indices"][closing])
    if who == "padding token":  # closes the same window, reads the row the real token stores
        extra = dict(slot=-1, position=p)
    else:  # stores position p - 1 in this launch (a prefill or verify step)
        extra = dict(slot=int(args["block_table"][r, (p - 1) // 8]) * 8 + (p - 1) % 8, position=p - 1)
    grown = dict(args)
    for name, value in (("positions", extra["position"]), ("slot_mapping", extra["slot"]), ("req_indices", r)):
        grown[name] = torch.cat([args[name], torch.tensor([value], dtype=args[name].dtype)])
    projection = torch.randn(len(grown["positions"]), 2 * 16)
    grown.update(kv=projection[:, :16], score=projection[:, 16:], out=torch.zeros(len(grown["positions"]), 16))
    monkeypatch.setattr(TritonJitKernel, "launch", lambda *a: pytest.fail("launched despite a race"))
    with pytest.raises(ValueError, match="^slot_mapping: a token stores a row that another token's window reads"):
        decode_step(**grown)


def test_warmup_keys_follow_the_spec_table():
    kernel = DecodeStepKernel()
    with pytest.raises(ValueError, match=r"^head_dim: \[0\] not supported"):
        kernel.get_warmup_keys(head_dim=0, compress_ratio=4)
    with pytest.raises(ValueError, match=r"^compress_ratio: \[64\] not supported"):
        kernel.get_warmup_keys(head_dim=128, compress_ratio=64)
    for ratio, block_size in ((4, 4), (128, 8)):
        keys = kernel.get_warmup_keys(head_dim=512, compress_ratio=ratio, launch_pdl=True)
        assert {(k.head_dim, k.block_size, k.launch_pdl) for k in keys} == {(512, block_size, True)}
        assert len(keys) == 8  # positions x slot_mapping x req_indices dtypes
        binaries = kernel.layouts.binary_keys(keys)
        assert {binary.layout for binary in binaries} == {""}  # the table's row stride is not specialised
        for binary in binaries:
            kernel.compile(binary)  # under the interpreter: checks the stand-ins dispatch to the key


@HOST_VALUES
@pytest.mark.parametrize("ratio,head_dim", [(4, 8), (128, 16)], ids=lambda v: str(v))
def test_the_device_sweep_runs_on_the_cpu(monkeypatch, capsys, ratio, head_dim):
    """``benchmarks/device/sweep_decode_step.py`` end to end, its inputs on the CPU and its
    timer replaced by one call: the byte checks of every variant pass, the table prints."""
    from benchmarks import bench_deepseek_v4
    from benchmarks.device import sweep_decode_step

    monkeypatch.setattr(bench_deepseek_v4, "DEVICE", "cpu")
    monkeypatch.setattr(bench_deepseek_v4, "MAX_SETS", 2)
    monkeypatch.setattr(sweep_decode_step, "gpu_us", lambda fn: fn() or 1.0)
    (line, _), = sweep_decode_step.sweep(9, head_dim, ratio)
    assert "default" in capsys.readouterr().out and f"r{ratio}" in line
