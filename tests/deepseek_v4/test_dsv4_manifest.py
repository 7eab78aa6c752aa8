"""The shipped DeepSeek V4 manifests: valid, complete for a deployment, compilable for sm_90.

The step-sequence test checks that what serving launches is in the manifests; these
check the manifests themselves.
"""

from __future__ import annotations

import json
import time

import pytest
from dsv4_helpers import MANIFESTS, manifest_keys

from deepseek_v4.common import RATIOS
from jitkern.kernel.registry import get_kernel
from jitkern.testing import check_coverage


def test_manifests_exist_and_cover_every_kernel_head_dim_and_ratio():
    assert MANIFESTS, "no warmup_manifests/deepseek_v4-*.json"
    configs = set()
    for path in MANIFESTS:
        for entry in json.loads(path.read_text())["kernels"]:
            configs.add((entry["kernel"], entry["config"]["head_dim"], entry["config"]["compress_ratio"]))
    for kernel in ("deepseek_v4.save_partial_states", "deepseek_v4.compress_windows", "deepseek_v4.decode_step"):
        for head_dim in (512, 128):
            for ratio in (4, 128):
                assert (kernel, head_dim, ratio) in configs


def test_manifests_load_with_the_jitkern_loader():
    """The loader validates each config against get_warmup_keys' annotations."""
    from jitkern import manifest

    for path in MANIFESTS:
        keys = manifest.manifest_keys(manifest.load_manifest(path))
        assert {name: set(k) for name, k in keys.items()} == manifest_keys([path])


def test_every_manifest_key_round_trips_through_its_warmup_inputs():
    """``compile`` under the interpreter checks ``warmup_inputs(key)`` dispatches to ``key``."""
    for name, keys in manifest_keys().items():
        assert keys, name
        for key in keys:
            get_kernel(name).compile(key)


@pytest.mark.compiled
def test_manifest_compiles_for_cuda90_without_a_gpu(triton_cache):
    """Every key compiles, filed under the key ``warmed_lookup_key`` names without compiling
    (which ``uncovered_by_warmup`` and the coverage checker rely on)."""
    from warmup_testing import compile_as_named

    from jitkern.targets import compile_only, parse_target

    started = time.perf_counter()
    compiled = 0
    with compile_only(parse_target("cuda:90")):
        for name, keys in manifest_keys().items():
            kernel = get_kernel(name)
            for key in keys:
                binary = compile_as_named(kernel, key)
                assert binary.metadata.num_warps == key.key.num_warps
                assert binary.metadata.launch_pdl == key.key.launch_pdl
                compiled += 1
    print(f"compiled {compiled} deepseek_v4 keys for cuda:90 in {time.perf_counter() - started:.1f}s")


def _deployment_calls(head_dim: int, ratio: int, index_dtype, table_width: int, tokens: int):
    """Real (CPU) tensors shaped as serving passes them: views of one projection, a
    contiguous cache and output, a block table ``table_width`` wide."""
    import torch

    from deepseek_v4.common import RATIOS

    geometry = RATIOS[ratio]
    width, bs = geometry.state_width(head_dim), geometry.block_size
    projection = torch.randn(tokens, 2 * width)
    blocks = max(table_width, 2)
    positions = torch.arange(ratio - tokens, ratio, dtype=index_dtype).clamp(min=0)  # the last closes a window
    store = dict(kv=projection[:, :width], score=projection[:, width:], ape=torch.randn(ratio, width),
                 positions=positions, state_cache=torch.zeros(blocks, bs, 2 * width),
                 slot_mapping=torch.arange(tokens, dtype=index_dtype), block_size=bs, state_width=width,
                 compress_ratio=ratio)
    block_table = torch.arange(table_width, dtype=torch.int32).repeat(2, 1) % blocks
    compress = dict(state_cache=store["state_cache"], block_table=block_table, positions=positions,
                    req_indices=torch.zeros(tokens, dtype=index_dtype), out=torch.empty(tokens, head_dim),
                    compress_ratio=ratio, head_dim=head_dim, block_size=bs)
    return store, compress


def _decode_call(store: dict, compress: dict, tokens: int) -> dict:
    """The fused decode step over the same tensors, each token a request of its own (a
    decode batch: the CPU check refuses tokens that store rows another token reads)."""
    import torch

    table_width, block_size = compress["block_table"].shape[1], compress["block_size"]
    block_table = torch.arange(tokens * table_width, dtype=torch.int32).view(tokens, table_width)
    positions = store["positions"]
    state_cache = torch.zeros(tokens * table_width, *store["state_cache"].shape[1:])
    slots = block_table[torch.arange(tokens), positions.long() // block_size] * block_size + positions % block_size
    req_indices = torch.arange(tokens, dtype=compress["req_indices"].dtype)
    return {**store, **compress, "state_cache": state_cache, "slot_mapping": slots.to(positions.dtype),
            "block_table": block_table, "req_indices": req_indices}


@pytest.mark.compiled
@pytest.mark.parametrize("target", ["cuda:90", "hip:gfx942"])
def test_serving_launches_hit_binaries_the_manifest_builds(target):
    """At Triton's level: the binary each deployment-shaped launch looks up (its real
    strides and pointer alignments; on AMD also whether each tensor's storage fits in
    2 GiB) is one that warming the manifest compiled."""
    import torch

    from jitkern import testing

    from deepseek_v4 import (CompressWindowsKernel, DecodeStepKernel, SavePartialStatesKernel, compress_windows,
                             decode_step, save_partial_states)
    from jitkern.targets import compile_only, parse_target

    with testing.record_launches(dry_run=True) as launches:
        for head_dim in (512, 128):
            for ratio in (4, 128):
                for index_dtype, table_width, tokens in ((torch.int64, 32, 1), (torch.int32, 37, 7)):
                    store, compress = _deployment_calls(head_dim, ratio, index_dtype, table_width, tokens)
                    save_partial_states(**store)
                    compress_windows(**compress)
                    SavePartialStatesKernel()(**store, launch_pdl=True)
                    CompressWindowsKernel()(**compress, launch_pdl=True)
                    fused = _decode_call(store, compress, tokens)
                    decode_step(**fused)
                    DecodeStepKernel()(**{n: v for n, v in fused.items() if n != "state_width"}, launch_pdl=True)
    assert len(launches) == 2 * 2 * 2 * 6
    with compile_only(parse_target(target)):
        uncovered = testing.uncovered_by_warmup(launches, {n: list(k) for n, k in manifest_keys().items()})
    assert not uncovered, "launches no manifest binary serves:\n  " + "\n  ".join(uncovered)


@pytest.mark.compiled
@pytest.mark.parametrize("ratio", [4, 128])
@pytest.mark.parametrize("head_dim", [38, 50])
def test_a_head_dim_not_a_multiple_of_4_warms_what_fresh_tensors_look_up(head_dim, ratio):
    """``out``'s rows of 4 * head_dim bytes are then not 16-byte multiples, but Triton
    specialises on where ``out`` starts, and a fresh one starts aligned: a deployment that
    declares no layout warms it aligned. ``score`` is the store's view at column W of one
    projection, unaligned when W % 4 != 0; one allocated on its own needs
    ``"unaligned": ["score"]`` (the public functions' docs say so)."""
    config = dict(head_dim=head_dim, compress_ratio=ratio, index_dtypes=["int32"])
    own_score = {"unaligned": ["score"]} if RATIOS[ratio].state_width(head_dim) % 4 else {}
    for name, layout in (("deepseek_v4.compress_windows", {}), ("deepseek_v4.decode_step", own_score),
                         ("deepseek_v4.save_partial_states", own_score)):
        assert check_coverage(get_kernel(name), config, layout, max_examples=40) > 0, name


@pytest.mark.compiled
@pytest.mark.parametrize("head_dim, ratio", [(512, 4), (24, 128)])
def test_a_one_token_step_takes_the_warmed_binary_whatever_its_row_strides(head_dim, ratio, tmp_path, monkeypatch):
    """A row of one token addresses the same floats whatever its stride, and the store takes
    any: a transposed column leaves 1 there, a tensor of its own W (head 24 at ratio 128:
    24, where the usual view of one ``[tokens, 2W]`` projection has 48, a multiple of 16), a
    row of a wider buffer anything. The kv and score row strides passed as they were looked
    up binaries no manifest without a declared layout builds: a compile on a batch of one."""
    import torch

    from jitkern import testing
    from jitkern.targets import compile_only, parse_target

    from deepseek_v4 import DecodeStepKernel, SavePartialStatesKernel, decode_step, save_partial_states

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    config = dict(head_dim=head_dim, compress_ratio=ratio, index_dtypes=["int64"])
    store, compress = _deployment_calls(head_dim, ratio, torch.int64, table_width=16, tokens=1)
    width = store["state_width"]
    wide = torch.randn(3, 3 * width + 16)
    rows = {"a transposed column": lambda: torch.randn(width, 1).t(),
            "a tensor of its own": lambda: torch.randn(1, width),
            "a row of a wider buffer": lambda: wide[1:2, 4:4 + width]}  # 16 bytes in: aligned
    with testing.record_launches(dry_run=True) as launches:
        for make in rows.values():
            one_token = {**store, "kv": make(), "score": make()}
            save_partial_states(**one_token)
            decode_step(**_decode_call(one_token, compress, tokens=1))
    warmed = {kernel.name: kernel.layouts.binary_keys(kernel.get_warmup_keys(**config))
              for kernel in (SavePartialStatesKernel(), DecodeStepKernel())}
    with compile_only(parse_target("cuda:90")):
        assert testing.uncovered_by_warmup(launches, warmed) == []
    assert [spec.kwargs["kv_row_stride"] for _kernel, spec in launches] == [2 * width] * 6


@pytest.mark.compiled
@pytest.mark.parametrize("target, pdl", [("cuda:90", True), ("cuda:80", False)])
def test_a_dry_run_on_the_cpu_launches_the_pdl_keys_the_target_would(target, pdl):
    """An engine passing ``{"launch_pdl": True}`` launches PDL keys on an H200 and plain ones
    on an A100: CPU tensors in a dry run for either choose as that GPU would, so a serving
    test on the CPU checks the keys serving launches there."""
    import torch

    from deepseek_v4 import save_partial_states
    from jitkern.testing import dry_run_gpu, record_launches

    store, _ = _deployment_calls(128, 4, torch.int32, table_width=4, tokens=3)
    with dry_run_gpu(target), record_launches(dry_run=True) as launches:
        save_partial_states(**store, pdl_kwargs={"launch_pdl": True})
    assert [spec.key.launch_pdl for _kernel, spec in launches] == [pdl]
