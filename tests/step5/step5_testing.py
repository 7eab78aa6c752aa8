"""Shared builders of the Step5 tests: random rows with realistic strides, KV block tables,
poisoned caches, the byte comparisons the spec allows, whole steps of each update path
(also for ``benchmarks/device/check_warps.py``), launches at another ``num_warps``, and a
check of the SASS of the fp8 conversions."""

from __future__ import annotations

import dataclasses
import os
import random
import re
from pathlib import Path
from typing import Any

import torch

from step5.reference import assert_summaries_close

GOLDEN = Path(os.environ.get("JITKERN_GOLDEN_DIR", Path(__file__).resolve().parents[1] / "golden"))
"""The golden vectors: ``tests/golden`` (or ``JITKERN_GOLDEN_DIR``)."""


def load_golden(name: str) -> dict:
    """A golden file, its tensors on torch's default device (CUDA in the GPU test mode)."""
    return torch.load(GOLDEN / name, map_location=torch.get_default_device())


POISON = 0xA5  # a byte no kernel should leave behind where it was told to write
OTHER_POISON = 0x5A


def random_rows(n: int, layout: str = "contiguous") -> tuple[torch.Tensor, torch.Tensor]:
    """``key`` and ``z`` bf16 ``[n, 1, 256]`` laid out as a serving engine may pass them.

    contiguous: two tensors. fused: slices of one ``[n, 1, 512]`` tensor (row stride 512).
    odd_rows: slices of a ``[n, 1, 600]`` tensor at 0 and 300 (row stride not a multiple of 16).
    interleaved: ``[n, 1, 512][..., ::2]`` and ``[..., 1::2]`` (element stride 2).
    z_offset: key contiguous; z a slice of a ``[n, 1, 260]`` projection at column 4, so 8
    bytes off a 16-byte boundary, rows 520 bytes apart.
    z mixes scales (so the scalar running max matters) and a few -inf entries.
    """
    key = torch.randn(n, 1, 256).mul(4).to(torch.bfloat16)
    z = (torch.randn(n, 1, 256) * torch.rand(n, 1, 1).mul(6)).to(torch.bfloat16)
    z[torch.rand(n, 1, 256) < 0.02] = float("-inf")
    if layout == "contiguous":
        return key, z
    if layout == "z_offset":
        projection = torch.randn(n, 1, 260).to(torch.bfloat16)
        projection[:, :, 4:] = z
        return key, projection[:, :, 4:]
    width, key_at, z_at, step = {"fused": (512, 0, 256, 1), "odd_rows": (600, 0, 300, 1), "interleaved": (512, 0, 1, 2)}[layout]
    shared = torch.randn(n, 1, width).to(torch.bfloat16)
    key_view = shared[:, :, key_at : key_at + 256 * step : step]
    z_view = shared[:, :, z_at : z_at + 256 * step : step]
    key_view.copy_(key)
    z_view.copy_(z)
    return key_view, z_view


def strided_index(values: list[int], dtype: torch.dtype, strided: bool) -> torch.Tensor:
    """An index tensor, as a stride-2 view of a larger tensor when ``strided``."""
    tensor = torch.tensor(values, dtype=dtype)
    if not strided:
        return tensor
    wide = torch.full((2 * len(values),), 12345, dtype=dtype)
    wide[::2] = tensor
    return wide[::2]


def poisoned_mean(blocks: int, block_size: int, strided: bool, poison: int = POISON) -> torch.Tensor:
    """``[blocks, block_size // 8, 256]`` uint8 full of ``poison``; blocks 512 bytes apart
    more than needed when ``strided`` (a view into a larger page buffer)."""
    inner = block_size // 8 * 256
    pages = torch.full((blocks, inner + (512 if strided else 0)), poison, dtype=torch.uint8)
    return pages[:, :inner].view(blocks, block_size // 8, 256)


class BlockTables:
    """Random, distinct KV blocks handed to requests, as a paged KV cache does."""

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.free = list(range(num_blocks))
        random.shuffle(self.free)

    def take(self, tokens: int) -> list[int]:
        count = -(-tokens // self.block_size)
        if count > len(self.free):
            raise RuntimeError("test ran out of KV blocks")
        taken, self.free = self.free[:count], self.free[count:]
        return taken

    def give_back(self, blocks: list[int]) -> None:
        self.free.extend(blocks)

    def slot(self, table: list[int], position: int) -> int:
        return table[position // self.block_size] * self.block_size + position % self.block_size


def assert_mean_matches(actual: torch.Tensor, expected: torch.Tensor, expected_other: torch.Tensor) -> None:
    """Bytes the reference wrote (equal under both poisons) within one fp8 step, >= 99% equal;
    every other byte untouched."""
    written = expected == expected_other
    assert (actual[~written] == expected[~written]).all(), "a kernel wrote mean bytes the reference did not"
    assert_summaries_close(actual[written], expected[written], "mean")


# --- whole steps, on torch's default device ---------------------------------------------------

SPAN = 512  # KV slots per request


def decode_inputs(batch: int, capacity: int, block_size: int, closing: float = 0.3):
    """``update_decode`` arguments: fused rows, a ``closing`` share of tokens closing a region,
    a tenth of the slots graph padding, strided mean blocks."""
    key, z = random_rows(batch, "fused")
    positions = torch.randint(0, SPAN, (batch,))
    positions[torch.rand(batch) < closing] |= 7
    slots = torch.arange(batch) * SPAN + positions
    slots[torch.rand(batch) < 0.1] = -1  # graph padding
    ring_base = torch.arange(batch) * capacity
    mean = poisoned_mean(batch * SPAN // block_size, block_size, strided=True)
    ring = torch.randn(batch * capacity, 512).to(torch.bfloat16)
    return [key, z, slots, positions, ring_base, mean, ring, capacity]


def verify_inputs(batch: int, capacity: int, block_size: int, draft_tokens: int):
    """``update_verify`` arguments: ``batch`` requests of ``1 + draft_tokens`` tokens."""
    q = 1 + draft_tokens
    key, z = random_rows(batch * q, "contiguous")
    seq_lens = torch.randint(q, SPAN, (batch,), dtype=torch.int32)
    positions = ((seq_lens - q)[:, None] + torch.arange(q)).flatten()
    slots = torch.arange(batch).repeat_interleave(q) * SPAN + positions
    query_start_loc = torch.arange(batch + 1, dtype=torch.int32) * q
    ring_base = torch.arange(batch).repeat_interleave(q) * capacity
    mean = poisoned_mean(batch * SPAN // block_size, block_size, strided=False)
    ring = torch.randn(batch * capacity, 512).to(torch.bfloat16)
    return [key, z, slots, query_start_loc, seq_lens, ring_base, mean, ring, capacity]


def prefill_inputs(requests: int, capacity: int, block_size: int) -> dict[str, Any]:
    """A chunked-prefill step of ``requests`` chunks (a third of them first chunks, the
    others continuing with rows of earlier chunks in the ring; up to ``3 * capacity + 4``
    tokens), as ``run_update("prefill", ...)`` takes it. Each request's KV slots are its
    own ``SPAN`` positions."""
    from step5 import Step5CSATailRing

    chunks = [(0 if r % 3 == 0 else random.randint(1, 200), random.randint(1, 3 * capacity + 4))
              for r in range(requests)]
    tokens = sum(count for _, count in chunks)
    ring = Step5CSATailRing(requests, tokens, capacity=capacity)
    ring.rows.copy_(torch.randn(ring.rows.shape))  # rows of earlier chunks
    for request in range(requests):
        ring.allocate(request)
    metadata = ring.prepare(list(range(requests)), [first for first, _ in chunks], [count for _, count in chunks])
    positions = torch.cat([torch.arange(first, first + count) for first, count in chunks])
    owners = torch.cat([torch.full((count,), r, dtype=torch.int32) for r, (_, count) in enumerate(chunks)])
    starts = torch.tensor([0] + [count for _, count in chunks]).cumsum(0).to(torch.int32)
    key, z = random_rows(tokens, "fused")
    return dict(key=key, z=z, slots=owners.to(torch.int64) * SPAN + positions, positions=positions, owners=owners,
                query_start_loc=starts, ring_base=metadata.base[:tokens], ring_slots=metadata.slot_mapping[:tokens],
                mean=poisoned_mean(requests * SPAN // block_size, block_size, strided=True), ring=ring.rows,
                capacity=capacity)


def launch_with_warps(kernel, spec, num_warps: int, **overrides: Any) -> Any:
    """Launch ``spec`` through Triton as its key with ``num_warps`` compiles (``constants``
    of that key: its code paths too), ``overrides`` replacing constexprs. Not a jitkern
    launch: jitkern builds a key only from its stand-ins, which dispatch to the shipped
    ``num_warps``."""
    from jitkern import LaunchSpec

    key = dataclasses.replace(spec.key, num_warps=num_warps)
    kwargs = {**kernel.triton_kwargs(LaunchSpec(spec.grid, spec.kwargs, key)), **overrides}
    return kernel.kernel[spec.grid](**kwargs)


def run_update(path: str, inputs, num_warps: int | None = None, **overrides: Any) -> Any:
    """One step of ``path`` (decode, prefill or verify) on ``inputs`` (``decode_inputs``, ...),
    writing their ``mean`` and ring. ``num_warps``: its summary kernel launched at that
    many warps (``launch_with_warps``), whose binary is returned; None: the public
    function, as shipped."""
    from step5.ops import summary_update as ops

    if path == "prefill":
        i = inputs
        groups = ops.build_prefill_groups(i["slots"], i["positions"], i["owners"], i["query_start_loc"])
        args = (i["key"], i["z"], groups, i["positions"], i["ring_base"])
        ring_args = (i["mean"], i["ring"], i["capacity"])
        if num_warps is None:
            ops.update_prefill(*args, i["ring_slots"], *ring_args)
        else:
            kernel = ops.PrefillSummaryKernel()
            binary = launch_with_warps(kernel, kernel.launch_spec(*args, *ring_args), num_warps, **overrides)
            ops.WriteRingKernel()(i["key"], i["z"], groups, i["ring_slots"], i["ring"])  # after every ring read
            return binary
        return None
    update, kernel = {"decode": (ops.update_decode, ops.UpdateDecodeKernel()),
                      "verify": (ops.update_verify, ops.UpdateVerifyKernel())}[path]
    if num_warps is None:
        update(*inputs)
        return None
    return launch_with_warps(kernel, kernel.launch_spec(*inputs), num_warps, **overrides)


def run_reference(path: str, inputs) -> None:
    """What the PyTorch reference writes for one step of ``path`` on ``inputs``."""
    from step5 import reference

    if path == "prefill":
        i = inputs
        reference.reference_update_prefill(i["key"], i["z"], i["slots"], i["positions"], i["owners"],
                                           i["query_start_loc"], i["ring_base"], i["ring_slots"], i["mean"],
                                           i["ring"], i["capacity"])
    else:
        getattr(reference, f"reference_update_{path}")(*inputs)


def clone_inputs(inputs):
    """A copy of ``inputs`` whose ``mean`` and ring a run may write."""
    if isinstance(inputs, dict):
        return {name: value.clone() if name in ("mean", "ring") else value for name, value in inputs.items()}
    return [value.clone() if isinstance(value, torch.Tensor) and index in (-3, -2) else value
            for index, value in zip(range(-len(inputs), 0), inputs)]


def written(inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, ring) of ``inputs``."""
    if isinstance(inputs, dict):
        return inputs["mean"], inputs["ring"]
    return inputs[-3], inputs[-2]


# --- the SASS of the fp8 conversions --------------------------------------------------------------

_F2FP_MERGE = re.compile(r"F2FP\.\S*E4M3\S*MERGE_C\s+(R\w+),\s*(R\w+),\s*(R\w+),\s*(R\w+)")
_WRITES = re.compile(r"^(?:@!?U?P\w+\s+)?([A-Z][\w.]*)\s+(R\d+)\b")


def foreign_fp8_merges(sass: str) -> list[str]:
    """The fp32 -> e4m3 pair conversions of ``sass`` (``triton.tools.disasm.get_sass``) whose
    merge operand, the upper 16 bits of their result, is neither RZ nor the result of an
    earlier conversion (the pair next to theirs); each with how that operand was made
    (``<-`` its writers, back through those that read their own register).

    What Triton's packing needs; what ptxas 12.8 breaks at one pair per thread, where it
    computes the merge operand from R1 (``step5.ops.common.hardware_fp8_is_safe``).
    Registers are followed in text order, which is enough for the straight-line code
    around a summary's store.
    """
    writers: dict[str, list[str]] = {}  # register -> the instructions that wrote it, in order
    found = []
    for line in sass.splitlines():
        instruction = line.split("\t")[-1].strip().rstrip(";")
        merge = _F2FP_MERGE.search(instruction)
        if merge and merge.group(4) != "RZ":
            register = merge.group(4)
            history = writers.get(register, [])
            if not history or not history[-1].startswith("F2FP"):
                chain = []
                for writer in reversed(history):
                    chain.append(writer)
                    if not re.search(rf",\s*{register}\b", writer):  # made from other registers
                        break
                found.append("  <-  ".join([instruction] + (chain or ["nothing"])))
        write = _WRITES.match(instruction)
        if write and not write.group(1).startswith(("ST", "RED", "BRA", "CALL", "RET", "EXIT")):
            opcode, first = write.group(1), int(write.group(2)[1:])
            width = 4 if ".128" in opcode else 2 if (".64" in opcode or ".WIDE" in opcode) else 1
            for register in range(first, first + width):
                writers.setdefault(f"R{register}", []).append(instruction)
    return found
