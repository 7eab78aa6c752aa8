"""The public Step5 functions' arguments (``Arguments``) and their relations (the ring's rows
for its capacity, verify's token counts), and the prefill metadata's rows, read only where
kernels run on host memory (``jitkern.kernel.validation.runs_on_host``)."""

from __future__ import annotations

import torch

from jitkern import Arg, Arguments, Within
from jitkern.kernel.validation import INDEX_DTYPES, first_outside

RING_ROW = 512  # a ring row is [key (256) | z (256)], bf16
SIZE_LIMIT = 2**30  # tokens, requests: what the kernels compute from them stays i32 (their binaries)
METADATA_SLOT_LIMIT = 2**31  # build_prefill_groups' metadata holds KV slots as int32

# The public functions' tensors. key and z rows may be strided (dims 0 and 2); of the index
# tensors only positions (the kernels take its stride); mean's blocks only.
ROW = Arg("tokens 1 256", torch.bfloat16)
INDEX = Arg("tokens", INDEX_DTYPES, contiguous=True)
SLOTS = Arg("tokens", INDEX_DTYPES, contiguous=True, values=Within(0, lambda s: s.blocks * s.regions * 8, padding=-1,
                                                                   note="the KV slots of mean"))
METADATA_SLOTS = Arg("tokens", INDEX_DTYPES, contiguous=True,  # build_prefill_groups': into its int32 metadata
                     values=Within(0, METADATA_SLOT_LIMIT, padding=-1, note="the metadata holds int32 slots"))
POSITIONS = Arg("tokens", INDEX_DTYPES, strides="+")
SLOT_POSITIONS = Arg("tokens", INDEX_DTYPES, strides="+", values=Within(0, where="slots", note="a token with a KV slot"))
RING_BASE = Arg("tokens", INDEX_DTYPES, contiguous=True, values=Within(
    0, lambda s: s.rows - s.capacity + 1, padding=-1, note="a request's {capacity} rows from its base must fit the "
    "ring's {rows}"))
RING_SLOTS = Arg("tokens", INDEX_DTYPES, contiguous=True, values=Within(0, "rows", padding=-1, note="the ring's rows"))
MEAN = Arg("blocks regions 256", torch.uint8, strides="_ 256 1")  # regions: block_size // 8
RING = Arg("rows 512", torch.bfloat16, contiguous=True)
STARTS = Arg("_", INDEX_DTYPES, contiguous=True,  # query_start_loc: requests + 1 cumulative counts
             values=Within(0, lambda s: s.tokens + 1, ascending=True, note="the step has {tokens} tokens"))
METADATA = Arg("_ 3", torch.int32, contiguous=True)  # build_prefill_groups' rows
SIZES = dict(tokens=range(SIZE_LIMIT), requests=range(SIZE_LIMIT), regions=range(1, 2**31))
CACHE = Arguments(mean=MEAN, sizes=SIZES)

def check_ring(call, checked, draft_tokens: int = 0) -> None:
    """``capacity >= 7 + draft_tokens`` rows per request, which ``ring`` holds."""
    ring, capacity = call["ring"], call["capacity"]
    if capacity < 7 + draft_tokens:
        raise ValueError(f"capacity: {capacity} ring rows per request is less than 7 + {draft_tokens} (draft tokens)")
    if ring.shape[0] < capacity:
        raise ValueError(f"ring: {ring.shape[0]} rows cannot hold one request of capacity {capacity}")


def check_verify_sizes(call, checked) -> None:
    """``update_verify``'s step: the same ``q >= 1`` tokens for each request, a
    ``query_start_loc`` entry more than ``seq_lens``, rings of ``7 + (q - 1)`` rows."""
    tokens, requests = checked.tokens, checked.requests
    if call["query_start_loc"].shape[0] != requests + 1:
        raise ValueError(f"query_start_loc: expected {requests + 1} entries (seq_lens has {requests}), "
                         f"got {call['query_start_loc'].shape[0]}")
    if bool(tokens) != bool(requests) or requests and tokens % requests:  # no requests: no launch, tokens dropped
        raise ValueError(f"slots: {tokens} tokens, not the same number (at least one) for each of seq_lens' "
                         f"{requests} requests")
    check_ring(call, checked, draft_tokens=tokens // requests - 1 if requests else 0)


# Each public function's arguments.
DECODE = Arguments(key=ROW, z=ROW, slots=SLOTS, positions=SLOT_POSITIONS, ring_base=RING_BASE, mean=MEAN, ring=RING,
                   capacity=int, sizes=SIZES, relations=check_ring)
VERIFY = Arguments(key=ROW, z=ROW, slots=SLOTS, query_start_loc=STARTS,
                   seq_lens=Arg("requests", INDEX_DTYPES, contiguous=True, values=Within(0)), ring_base=RING_BASE,
                   mean=MEAN, ring=RING, capacity=int, sizes=SIZES, relations=check_verify_sizes)
BUILD = Arguments(slots=METADATA_SLOTS, positions=SLOT_POSITIONS, owners=INDEX, query_start_loc=STARTS,
                  out=Arg("_ 3", torch.int32, contiguous=True, optional=True), sizes=SIZES)
UPDATE = Arguments(key=ROW, z=ROW, metadata=METADATA, positions=POSITIONS, ring_base=RING_BASE, ring_slots=RING_SLOTS,
                   mean=MEAN, ring=RING, capacity=int, sizes=SIZES, relations=check_ring)


# --- the prefill metadata's values, where kernels run on host memory (``runs_on_host``) -------


def check_prefill_values(metadata, positions, mean, n_groups: int) -> None:
    """``update_prefill``'s metadata rows: those ``build_prefill_groups`` made of this step's
    inputs address only this step's tokens, KV slots in ``mean`` and ring rows after this
    step's positions."""
    tokens = positions.shape[0]
    if tokens:
        _check_group_rows(metadata[:n_groups].long(), positions, mean.shape[0] * mean.shape[1] * 8)
    _check_request_rows(metadata, n_groups, tokens)


def _check_group_rows(groups, positions, kv_slots: int) -> None:
    """Rows ``[closing token, KV slot, rows from the ring]``, or -1 rows (unused)."""
    tokens = positions.shape[0]
    token, slot, ring_rows = groups.unbind(1)
    position = positions.long()[token.clamp(0, tokens - 1)]
    rules = (  # (field, its values, which are good, the valid range)
        ("token", token, (token >= 0) & (token < tokens), f"in [0, {tokens}) (the step's tokens)"),
        ("KV slot", slot, (slot >= 0) & (slot < kv_slots), f"in [0, {kv_slots}) (the KV slots of mean)"),
        ("ring rows", ring_rows, (ring_rows >= 0) & (ring_rows <= 7) & (token + ring_rows >= 7),
         "in [max(0, 7 - token), 7]"),
        ("the token's position", position, (position >= 7) & (position % 8 == 7),
         "7 mod 8 and >= 7, as a closing token's is"),
    )
    for field, values, good, valid in rules:
        at = first_outside(good.long(), 1, where=token != -1)
        if at is not None:
            raise ValueError(f"metadata: row {at} = {groups[at].tolist()}: {field} {int(values[at])} is not {valid}; "
                             "pass the metadata build_prefill_groups made of this step")


def _check_request_rows(metadata, n_groups: int, tokens: int) -> None:
    """Rows ``[first, end, _]`` naming a request's last tokens ``first .. end - 1``, or -1 rows."""
    first, end = metadata[n_groups:, 0].long(), metadata[n_groups:, 1].long()
    good = (first >= 0) & (first <= end) & (end <= tokens)
    at = first_outside(good.long(), 1, where=first != -1)
    if at is not None:
        raise ValueError(f"metadata: row {n_groups + at} = {metadata[n_groups + at].tolist()}: tokens "
                         f"[{int(first[at])}, {int(end[at])}) are not within the step's [0, {tokens}); "
                         "pass the metadata build_prefill_groups made of this step")
