"""The summary cache layer: fp8 region summaries beside the main KV, sharing its block ids."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from jitkern.kernel.arguments import Arguments
from jitkern.kernel.validation import check_int
from step5.ops import summary_update
from step5.ops import validate
from step5.ring import Step5CSATailRing, as_device

REGION = 8
SUMMARY_BYTES = 256  # one fp8 e4m3 summary of 256 dims per region


@dataclass(frozen=True)
class Step5SummaryCacheSpec:
    """How an engine sizes the summary layer: 256 uint8 bytes per 8 tokens, the main
    KV block size, the main KV block ids (so it is prefix-cached like any other page)."""

    block_size: int
    tokens_per_state: int = REGION
    head_size: int = SUMMARY_BYTES
    num_kv_heads: int = 1
    dtype: torch.dtype = torch.uint8

    def __post_init__(self):
        if not isinstance(self.block_size, int) or self.block_size <= 0 or self.block_size % REGION:
            raise ValueError(f"block_size: {self.block_size} is not a positive multiple of 8; Step5 KV blocks "
                             "must align to eight-token regions")
        # Fields an engine reads to size the layer: fixed by the summary format.
        for name, fixed in (("tokens_per_state", REGION), ("head_size", SUMMARY_BYTES), ("num_kv_heads", 1),
                            ("dtype", torch.uint8)):
            value = getattr(self, name)
            if type(value) is not type(fixed) or value != fixed:
                raise ValueError(f"{name}: the summary layer has {fixed}, got {value!r}")

    @property
    def regions_per_block(self) -> int:
        return self.block_size // REGION

    @property
    def page_size_bytes(self) -> int:
        return self.regions_per_block * SUMMARY_BYTES

    def allocate(self, num_blocks: int, device: torch.device | str | None = None) -> torch.Tensor:
        """A ``[num_blocks, block_size // 8, 256]`` uint8 ``mean`` cache."""
        check_int("num_blocks", num_blocks, minimum=0)
        return torch.zeros((num_blocks, self.regions_per_block, SUMMARY_BYTES), dtype=self.dtype, device=as_device(device))


_STEP_INDEX = dict(slots=Arguments(slots=validate.INDEX, sizes=validate.SIZES),
                   positions=Arguments(positions=validate.POSITIONS, sizes=validate.SIZES))


def _step_tokens(name: str, index, ring) -> int:
    """The step's token count, from ``index`` (``slots``, or ``positions`` for prefill), checked
    before the ring's per-token buffers are sliced to it."""
    if not isinstance(ring, Step5CSATailRing):
        raise ValueError(f"ring: expected a Step5CSATailRing, got {type(ring).__name__}")
    _STEP_INDEX[name].check({name: index})
    if index.shape[0] > ring.max_tokens:
        raise ValueError(f"{name}: {index.shape[0]} tokens, more than the ring's max_tokens={ring.max_tokens}")
    return index.shape[0]


class Step5SparseSummaryCache:
    """FP8 summaries of each block's closed eight-token regions in ``mean`` (uint8 ``[blocks,
    block_size // 8, 256]``, blocks may be strided): a region's once, by its eighth row, from
    the rows waiting in a ``Step5CSATailRing``; the cache holds no per-request state."""

    def __init__(self, mean: torch.Tensor):
        summary_update.summary_geometry(mean)  # validates
        self.mean = mean

    @property
    def block_size(self) -> int:
        return self.mean.shape[1] * REGION

    def update_decode(self, key, z, slots, positions, ring: Step5CSATailRing) -> None:
        n = _step_tokens("slots", slots, ring)
        summary_update.update_decode(key, z, slots, positions, ring.metadata().base[:n], self.mean, ring.rows, ring.capacity)

    def update_verify(self, key, z, slots, query_start_loc, seq_lens, ring: Step5CSATailRing) -> None:
        n = _step_tokens("slots", slots, ring)
        summary_update.update_verify(key, z, slots, query_start_loc, seq_lens, ring.metadata().base[:n], self.mean,
                                     ring.rows, ring.capacity)

    def update_prefill(self, key, z, metadata, positions, ring: Step5CSATailRing) -> None:
        """``metadata`` from ``build_prefill_groups``; the token count is ``positions``'."""
        n = _step_tokens("positions", positions, ring)
        ring_metadata = ring.metadata()
        summary_update.update_prefill(key, z, metadata, positions, ring_metadata.base[:n],
                                      ring_metadata.slot_mapping[:n], self.mean, ring.rows, ring.capacity)
