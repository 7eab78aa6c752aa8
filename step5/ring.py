"""The tail ring: raw ``[key | z]`` rows of each request's open region, until it closes.

Each request with a ring owns ``capacity`` consecutive rows starting at ``base``; the row
of position ``p`` is ``base + p % capacity``. ``capacity >= 7 + k`` (k = draft tokens per
verify step) is what lets a verify step write its rows while a closing token still has
to read the region's older ones (spec, "Why 7 + k is enough").

Host side only: ``prepare`` turns the step's host schedule (which requests, first
position, token count) into per-token ``base`` and ``slot_mapping``, copied into
persistent device buffers so a CUDA graph can keep pointing at them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import torch

REGION = 8
RING_ROW = 512  # [key (256) | z (256)], bf16


class RingFullError(RuntimeError):
    """No free rows for another request: raised instead of overwriting another request's rows."""


@dataclass(frozen=True)
class Step5RingMetadata:
    """Per token of the prepared step (slice ``[:tokens]``).

    ``base``: first ring row of the token's request, -1 without a ring (or padding).
    ``slot_mapping``: the ring row where the prefill path stores the token's row because
    its region is still open at the end of the step; -1 otherwise.
    """

    base: torch.Tensor
    slot_mapping: torch.Tensor


def default_capacity(draft_tokens: int) -> int:
    """The smallest multiple of 8 that is at least ``7 + draft_tokens``."""
    return -(-(7 + draft_tokens) // REGION) * REGION


class Step5CSATailRing:
    """A ring buffer of ``[key | z]`` rows, ``capacity`` rows per live request."""

    def __init__(
        self,
        max_requests: int,
        max_tokens: int,
        *,
        draft_tokens: int = 0,
        capacity: int | None = None,
        device: torch.device | str | None = None,  # None: torch's default device
        index_dtype: torch.dtype = torch.int32,
    ):
        if draft_tokens < 0:
            raise ValueError(f"draft_tokens: {draft_tokens} is negative")
        capacity = default_capacity(draft_tokens) if capacity is None else int(capacity)
        if capacity < 7 + draft_tokens:
            raise ValueError(f"capacity: {capacity} rows per request is less than 7 + {draft_tokens} draft tokens")
        if max_requests < 1 or max_tokens < 1:
            raise ValueError(f"max_requests ({max_requests}) and max_tokens ({max_tokens}) must be positive")
        if index_dtype not in (torch.int32, torch.int64):
            raise ValueError(f"index_dtype: expected torch.int32 or torch.int64, got {index_dtype}")
        self.capacity = capacity
        self.draft_tokens = draft_tokens
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.rows = torch.zeros((max_requests * capacity, RING_ROW), dtype=torch.bfloat16, device=device)
        self._base = torch.full((max_tokens,), -1, dtype=index_dtype, device=device)
        self._slot_mapping = torch.full((max_tokens,), -1, dtype=index_dtype, device=device)
        self._free = list(range(max_requests - 1, -1, -1))  # chunk indices; pop() gives the lowest
        self._owned: dict[Hashable, int] = {}

    # --- requests ------------------------------------------------------------------------

    def allocate(self, request_id: Hashable) -> int:
        """Give a starting request its ``capacity`` rows; returns its ``base``."""
        if request_id in self._owned:
            raise ValueError(f"request {request_id!r} already has ring rows")
        if not self._free:
            raise RingFullError(
                f"ring full: all {self.max_requests} requests' rows are taken; cannot start {request_id!r}"
            )
        chunk = self._free.pop()
        self._owned[request_id] = chunk
        return chunk * self.capacity

    def free(self, request_id: Hashable) -> None:
        """Release the rows of a finished request."""
        try:
            chunk = self._owned.pop(request_id)
        except KeyError:
            raise ValueError(f"request {request_id!r} has no ring rows") from None
        self._free.append(chunk)

    def base_of(self, request_id: Hashable) -> int:
        if request_id not in self._owned:
            raise ValueError(f"request {request_id!r} has no ring rows")
        return self._owned[request_id] * self.capacity

    @property
    def live_requests(self) -> int:
        return len(self._owned)

    # --- per-step metadata ---------------------------------------------------------------

    def prepare(
        self,
        request_ids: Sequence[Hashable | None],
        first_positions: Sequence[int],
        query_lens: Sequence[int],
        num_tokens: int | None = None,
    ) -> Step5RingMetadata:
        """Per-token ``base`` and ``slot_mapping`` of a step, from its host schedule.

        Request ``i`` sends ``query_lens[i]`` tokens at positions ``first_positions[i]`` on,
        its tokens contiguous and in request order; ``None`` as an id means a request
        without a ring. Tokens past the requests' (up to ``num_tokens``) are padding: -1.
        """
        if not (len(request_ids) == len(first_positions) == len(query_lens)):
            raise ValueError("request_ids, first_positions and query_lens must have one entry per request")
        query_lens_t = torch.tensor(list(query_lens), dtype=torch.int64)
        real_tokens = int(query_lens_t.sum()) if len(query_lens) else 0
        num_tokens = real_tokens if num_tokens is None else num_tokens
        if num_tokens < real_tokens or num_tokens > self.max_tokens:
            raise ValueError(
                f"num_tokens: {num_tokens} must hold the {real_tokens} tokens and fit max_tokens={self.max_tokens}"
            )
        bases = torch.tensor([-1 if r is None else self.base_of(r) for r in request_ids], dtype=torch.int64)
        firsts = torch.tensor(list(first_positions), dtype=torch.int64)
        owners = torch.repeat_interleave(torch.arange(len(query_lens)), query_lens_t)
        starts = torch.cumsum(query_lens_t, 0) - query_lens_t
        positions = firsts[owners] + torch.arange(real_tokens) - starts[owners]
        last = (firsts + query_lens_t - 1)[owners]
        base = bases[owners]
        # open at the end of the step: same region as the request's last token, which does not close it
        still_open = (positions // REGION == last // REGION) & (last % REGION != REGION - 1) & (base >= 0)
        slot_mapping = torch.where(still_open, base + positions % self.capacity, -1)
        padding = torch.full((num_tokens - real_tokens,), -1, dtype=torch.int64)
        self._base[:num_tokens].copy_(torch.cat([base, padding]), non_blocking=True)
        self._slot_mapping[:num_tokens].copy_(torch.cat([slot_mapping, padding]), non_blocking=True)
        return self.metadata()

    def metadata(self) -> Step5RingMetadata:
        """The prepared step's per-token metadata (persistent buffers: slice ``[:tokens]``)."""
        return Step5RingMetadata(base=self._base, slot_mapping=self._slot_mapping)
