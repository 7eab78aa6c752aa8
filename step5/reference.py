"""PyTorch reference of Step5 CSA region summaries, written from ``docs/spec/step5-csa.md``.

Imported only by tests and benchmarks. Nothing here looks at the kernels: each function
restates one paragraph of the spec, in the plainest PyTorch that computes it.

- ``summarize_regions``: the summary of regions given their 8 rows in position order.
- ``fp8_e4m3_bytes``: bf16 rounding, then fp8 e4m3fn with saturation to +-448.
- ``reference_update_decode`` / ``_prefill`` / ``_verify``: what each update path writes
  into ``mean`` and the ring, token by token.
- ``ReferenceSchedule``: the accepted rows of every request of a serving schedule, and
  the summary every region closed by accepted tokens must have (the spec's invariant).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

REGION = 8  # tokens per region
DIM = 256  # index-head dimension
FP8_MAX = 448.0


def fp8_e4m3_bytes(summary: torch.Tensor) -> torch.Tensor:
    """``fp8_e4m3fn(bf16(summary))`` as uint8 bytes; saturates to +-448, NaN stays NaN.

    torch's float8 cast does not saturate (it turns overflow into NaN), hence the clamp,
    which keeps NaN. Rounding goes through bf16 first, as the spec requires.
    """
    rounded = summary.to(torch.bfloat16).to(torch.float32)
    return rounded.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


def summarize_regions(key: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Summaries of regions whose rows are ``key``/``z`` ``[regions, 8, 256]``, in position order.

    fp32 online softmax over the 8 rows with ONE running maximum per region (a scalar,
    not one per dimension), then ``num / max(den, 1e-20)``, stored as fp8 bytes.
    """
    key = key.to(torch.float32)
    z = z.to(torch.float32)
    regions, device = key.shape[0], key.device
    neg_inf = float("-inf")
    m = torch.full((regions, 1), neg_inf, device=device)
    num = torch.zeros(regions, DIM, device=device)
    den = torch.zeros(regions, DIM, device=device)
    for t in range(key.shape[1]):
        z_t = z[:, t]
        m_new = torch.maximum(m, z_t.max(dim=1, keepdim=True).values)
        alpha = torch.where(m == neg_inf, 0.0, torch.exp(m - m_new))  # 0 when m is -inf
        w = torch.where(m_new == neg_inf, 0.0, torch.exp(z_t - m_new))  # 0 when all -inf so far
        num = num * alpha + w * key[:, t]
        den = den * alpha + w
        m = m_new
    return fp8_e4m3_bytes(num / den.clamp_min(1e-20))


def fp8_values(data: torch.Tensor) -> torch.Tensor:
    """The float values of fp8 e4m3fn bytes (NaN where the byte is NaN)."""
    return data.view(torch.float8_e4m3fn).to(torch.float32)


def fp8_step_distance(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """How many representable fp8 e4m3fn values lie between two bytes (0 = equal).

    Bytes are mapped to a monotone integer scale (sign-magnitude to two's complement),
    so +0 and -0 are 0 steps apart and the step between neighbours is 1. NaN bytes are
    equal only to NaN bytes; NaN against a number counts as 1000 steps.
    """

    def ordinal(data):
        data = data.to(torch.int32)
        magnitude = data & 0x7F
        return torch.where(data & 0x80 != 0, -magnitude, magnitude)

    distance = (ordinal(actual) - ordinal(expected)).abs()
    nan_a = (actual.to(torch.int32) & 0x7F) == 0x7F
    nan_e = (expected.to(torch.int32) & 0x7F) == 0x7F
    return torch.where(nan_a | nan_e, torch.where(nan_a & nan_e, 0, 1000), distance)


def assert_summaries_close(actual: torch.Tensor, expected: torch.Tensor, what: str = "summary") -> None:
    """Every byte within one fp8 step of the reference, and at least 99% equal.

    A GPU ``exp`` is not bit-identical to a CPU one: the spec allows one step in rare entries.
    """
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if actual.numel() == 0:
        return
    distance = fp8_step_distance(actual.cpu(), expected.cpu())
    worst = int(distance.max())
    equal = float((distance == 0).float().mean())
    if worst > 1 or equal < 0.99:
        index = tuple(int(i) for i in (distance == distance.max()).nonzero()[0])
        raise AssertionError(
            f"{what}: {equal:.2%} bytes equal, worst {worst} fp8 steps at {index}: "
            f"got {int(actual[index])} expected {int(expected[index])}"
        )


# --- the three update paths, token by token --------------------------------------------


def _mean_entry(mean: torch.Tensor, slot: int) -> torch.Tensor:
    """The 256 bytes holding the summary of the region closed by KV ``slot``."""
    block_size = mean.shape[1] * REGION
    return mean[slot // block_size, (slot % block_size) // REGION]


def _ring_row(ring: torch.Tensor, base: int, position: int, capacity: int) -> torch.Tensor:
    return ring[base + position % capacity]


def _summarize_one(rows: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    key = torch.stack([k for k, _ in rows])[None]
    z = torch.stack([zz for _, zz in rows])[None]
    return summarize_regions(key, z)[0]


def _row(key, z, token):
    return key[token, 0].clone(), z[token, 0].clone()


def reference_update_decode(key, z, slots, positions, ring_base, mean, ring, capacity) -> None:
    """Decode: a closing token replays its 7 ring rows and adds its own; others store their row."""
    for token in range(slots.shape[0]):
        slot, position, base = int(slots[token]), int(positions[token]), int(ring_base[token])
        if slot < 0 or base < 0:
            continue  # padding, or a request without a ring
        if position % REGION == REGION - 1:
            rows = [_split(_ring_row(ring, base, p, capacity)) for p in range(position - 7, position)]
            _mean_entry(mean, slot)[:] = _summarize_one(rows + [_row(key, z, token)])
        else:
            _ring_row(ring, base, position, capacity)[:] = torch.cat(_row(key, z, token))


def _split(ring_row: torch.Tensor):
    return ring_row[:DIM].clone(), ring_row[DIM:].clone()


def reference_update_prefill(
    key, z, slots, positions, owners, query_start_loc, ring_base, ring_slots, mean, ring, capacity
) -> None:
    """Prefill: every closed region reads its earlier rows from the ring, the rest from this
    step; only then are the rows of regions still open stored (at ``ring_slots``)."""
    starts = query_start_loc.tolist()
    for token in range(slots.shape[0]):
        slot, position, base = int(slots[token]), int(positions[token]), int(ring_base[token])
        if slot < 0 or base < 0 or position % REGION != REGION - 1:
            continue
        first_token = starts[int(owners[token])]
        first_position = int(positions[first_token])  # the chunk's positions are consecutive
        rows = []
        for p in range(position - 7, position + 1):
            if p >= first_position:
                rows.append(_row(key, z, token - (position - p)))
            else:
                rows.append(_split(_ring_row(ring, base, p, capacity)))
        _mean_entry(mean, slot)[:] = _summarize_one(rows)
    for token in range(slots.shape[0]):  # every ring read above precedes these writes
        if int(ring_slots[token]) >= 0:
            ring[int(ring_slots[token])] = torch.cat(_row(key, z, token))


def reference_update_verify(key, z, slots, query_start_loc, seq_lens, ring_base, mean, ring, capacity) -> None:
    """Verify: ``q`` tokens per request at positions ``seq_len - q .. seq_len - 1``, handled in
    position order: a closing token summarizes (earlier rows from the ring unless this step
    carries them), any other token stores its row."""
    requests = seq_lens.shape[0]
    q = slots.shape[0] // requests if requests else 0
    for request in range(requests):
        first_token, seq_len = int(query_start_loc[request]), int(seq_lens[request])
        first_position = seq_len - q
        for j in range(q):
            token, position = first_token + j, first_position + j
            slot, base = int(slots[token]), int(ring_base[token])
            if slot < 0 or base < 0 or position < 0:
                continue
            if position % REGION == REGION - 1:
                rows = []
                for p in range(position - 7, position + 1):
                    if p >= first_position:
                        rows.append(_row(key, z, token - (position - p)))
                    else:
                        rows.append(_split(_ring_row(ring, base, p, capacity)))
                _mean_entry(mean, slot)[:] = _summarize_one(rows)
            else:
                _ring_row(ring, base, position, capacity)[:] = torch.cat(_row(key, z, token))


# --- a whole serving schedule -----------------------------------------------------------


@dataclass
class ReferenceRequest:
    """The accepted rows of one request, and where its KV slots are."""

    block_table: list[int]
    block_size: int
    key: list[torch.Tensor] = field(default_factory=list)  # accepted rows, by position
    z: list[torch.Tensor] = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.key)

    def slot(self, position: int) -> int:
        return self.block_table[position // self.block_size] * self.block_size + position % self.block_size

    def accept(self, key_rows: torch.Tensor, z_rows: torch.Tensor) -> None:
        """Append accepted rows (``[n, 256]`` each) at the next positions."""
        self.key.extend(key_rows.unbind(0))
        self.z.extend(z_rows.unbind(0))

    def closed_regions(self) -> int:
        return self.length // REGION

    def expected_summaries(self) -> tuple[list[int], torch.Tensor]:
        """(closing slot, summary bytes ``[regions, 256]``) of every region closed by accepted rows."""
        regions = self.closed_regions()
        if regions == 0:
            return [], torch.empty(0, DIM, dtype=torch.uint8)
        key = torch.stack(self.key[: regions * REGION]).view(regions, REGION, DIM)
        z = torch.stack(self.z[: regions * REGION]).view(regions, REGION, DIM)
        slots = [self.slot(r * REGION + REGION - 1) for r in range(regions)]
        return slots, summarize_regions(key, z)


class ReferenceSchedule:
    """Accepted rows per request; checks the spec's invariant on a ``mean`` cache."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.requests: dict[int, ReferenceRequest] = {}

    def add(self, request_id: int, block_table: list[int]) -> ReferenceRequest:
        self.requests[request_id] = ReferenceRequest(block_table, self.block_size)
        return self.requests[request_id]

    def remove(self, request_id: int) -> None:
        del self.requests[request_id]

    def expected(self, request_ids=None) -> tuple[list[int], torch.Tensor]:
        """(slots, summaries) of every region closed by accepted tokens of these requests."""
        slots, summaries = [], []
        for request_id in self.requests if request_ids is None else request_ids:
            request_slots, request_summaries = self.requests[request_id].expected_summaries()
            slots += request_slots
            summaries.append(request_summaries)
        return slots, torch.cat(summaries) if summaries else torch.empty(0, DIM, dtype=torch.uint8)


def gather_summaries(mean: torch.Tensor, slots: list[int]) -> torch.Tensor:
    """The stored summary bytes of the regions closed by these KV slots."""
    if not slots:
        return torch.empty(0, DIM, dtype=torch.uint8)
    return torch.stack([_mean_entry(mean, s) for s in slots]).cpu()
