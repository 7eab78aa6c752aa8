"""The tail ring: raw ``[key | z]`` rows of each request's open region, until it closes
(``docs/spec/step5-csa.md``, "The tail ring"; why ``capacity >= 7 + k`` is enough).
Host side only: ``prepare`` turns the step's host schedule into per-token ``base`` and
``slot_mapping``, copied into persistent device buffers a CUDA graph can keep pointing at.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Hashable, Sequence

import torch

from jitkern.kernel.grid import cdiv
from jitkern.kernel.validation import INDEX_DTYPES

REGION = 8
RING_ROW = 512  # [key (256) | z (256)], bf16


class RingFullError(RuntimeError):
    """No free rows for another request: raised instead of overwriting another request's rows."""


@dataclass(frozen=True)
class Step5RingMetadata:
    """Per token of the prepared step (slice ``[:tokens]``)."""

    base: torch.Tensor  # the first ring row of the token's request; -1 without a ring, or padding
    slot_mapping: torch.Tensor  # where prefill stores the token's row, its region open at the step's end; else -1


def default_capacity(draft_tokens: int) -> int:
    """The smallest multiple of 8 that is at least ``7 + draft_tokens``."""
    return cdiv(7 + draft_tokens, REGION) * REGION


def _int(name: str, value, minimum: int, why: str = "") -> int:
    """A size or position from the caller, at least ``minimum``: an int (numpy's too), never
    a bool or a float (``True`` would be 1 row, 8.5 silently 8)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: {value} is less than {minimum}{why}")
    return int(value)


def _length(name: str, values) -> int:
    try:
        return len(values)
    except TypeError:
        raise ValueError(f"{name}: expected a sequence, got {type(values).__name__}") from None


def _host_ints(name: str, values, count: int) -> list[int]:
    """``count`` ints >= 0 of the host schedule, checked as Python values (no device read)."""
    if _length(name, values) != count:
        raise ValueError(f"{name}: {len(values)} entries, but request_ids has {count}")
    return [_int(name, value, 0, f" (entry {i})") for i, value in enumerate(values)]


def as_device(device) -> torch.device | None:
    """``device`` as torch reads it (None: torch's default); anything else is a ValueError."""
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError, ValueError) as error:
        raise ValueError(f"device: {device!r} is not a torch device ({error})") from None


class Step5CSATailRing:
    """A ring buffer of ``[key | z]`` rows, ``capacity`` rows per live request."""

    def __init__(self, max_requests: int, max_tokens: int, *, draft_tokens: int = 0, capacity: int | None = None,
                 device: torch.device | str | None = None, index_dtype: torch.dtype = torch.int32):  # device None: the default
        draft_tokens = _int("draft_tokens", draft_tokens, 0)
        capacity = default_capacity(draft_tokens) if capacity is None else _int(
            "capacity", capacity, 7 + draft_tokens, f" rows (7 + {draft_tokens} draft tokens)")
        max_requests, max_tokens = _int("max_requests", max_requests, 1), _int("max_tokens", max_tokens, 1)
        if index_dtype not in INDEX_DTYPES:
            raise ValueError(f"index_dtype: expected torch.int32 or torch.int64, got {index_dtype}")
        device = as_device(device)
        self.capacity, self.draft_tokens, self.max_requests, self.max_tokens = capacity, draft_tokens, max_requests, max_tokens
        self.rows = torch.zeros((max_requests * capacity, RING_ROW), dtype=torch.bfloat16, device=device)
        self._base = torch.full((max_tokens,), -1, dtype=index_dtype, device=device)
        self._slot_mapping = torch.full((max_tokens,), -1, dtype=index_dtype, device=device)
        self._free = list(range(max_requests - 1, -1, -1))  # chunk indices; pop() gives the lowest
        self._owned: dict[Hashable, int] = {}

    # --- requests ------------------------------------------------------------------------

    def allocate(self, request_id: Hashable) -> int:
        """Give a starting request its ``capacity`` rows; returns its ``base``."""
        if request_id is None:  # prepare reads None as a request without a ring
            raise ValueError("request_id: None is not an id (prepare takes it for a request without a ring)")
        try:
            hash(request_id)
        except TypeError:
            raise ValueError(f"request_id: expected a hashable id, got {type(request_id).__name__}") from None
        if request_id in self._owned:
            raise ValueError(f"request_id: {request_id!r} already has ring rows")
        if not self._free:
            raise RingFullError(f"ring full: all {self.max_requests} requests' rows are taken; cannot start {request_id!r}")
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

    def prepare(self, request_ids: Sequence[Hashable | None], first_positions: Sequence[int], query_lens: Sequence[int],
                num_tokens: int | None = None) -> Step5RingMetadata:
        """Per-token ``base`` and ``slot_mapping`` of a step, from its host schedule.

        Request ``i`` sends ``query_lens[i]`` tokens at positions ``first_positions[i]`` on,
        its tokens contiguous and in request order; ``None`` as an id means a request
        without a ring. Tokens past the requests' (up to ``num_tokens``) are padding: -1.
        """
        requests = _length("request_ids", request_ids)
        first_positions = _host_ints("first_positions", first_positions, requests)
        query_lens = _host_ints("query_lens", query_lens, requests)
        real_tokens = sum(query_lens)
        if real_tokens > self.max_tokens:
            raise ValueError(f"query_lens: {real_tokens} tokens do not fit max_tokens={self.max_tokens}")
        num_tokens = real_tokens if num_tokens is None else _int("num_tokens", num_tokens, real_tokens, " (the requests' tokens)")
        if num_tokens > self.max_tokens:
            raise ValueError(f"num_tokens: {num_tokens} does not fit max_tokens={self.max_tokens}")
        try:
            bases = [-1 if r is None else self._owned[r] * self.capacity for r in request_ids]
        except KeyError as missing:
            raise ValueError(f"request_ids: request {missing.args[0]!r} has no ring rows") from None
        except TypeError:
            raise ValueError("request_ids: expected hashable ids (None: a request without a ring)") from None
        query_lens_t, bases, firsts = (torch.tensor(values, dtype=torch.int64) for values in (query_lens, bases, first_positions))
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
