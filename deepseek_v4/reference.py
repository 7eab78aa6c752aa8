"""PyTorch references of the store and the compressor, written from the spec.

For tests and benchmarks only. Three views of one computation:

- ``save_partial_states_ref``: the store, row by row as the spec states it;
- ``compress_windows_ref``: the compressor reading the paged cache through a block table;
- ``compress_sequence_ref``: the straightforward version that takes a request's whole
  token sequence (``kv``, ``score``) and returns every window's entry, with no cache at
  all, so that tests can check the paged path (store, then compressor, step by step)
  against it.

The softmax runs in float64 and rounds once to float32: a reference closer to the exact
value than any float32 kernel, so tolerances measure the kernel's error alone.
"""

from __future__ import annotations

import torch

from deepseek_v4.common import RATIOS


def save_partial_states_ref(
    kv: torch.Tensor,
    score: torch.Tensor,
    ape: torch.Tensor,
    positions: torch.Tensor,
    state_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    block_size: int,
    state_width: int,
    compress_ratio: int,
) -> None:
    """In place: for every token with slot >= 0, ``row[0:H] = kv``,
    ``row[state_width:state_width+H] = score + ape[position % compress_ratio]``."""
    head_size = kv.shape[-1]
    for i in range(kv.shape[0]):
        slot = int(slot_mapping[i])
        if slot < 0:
            continue
        row = state_cache[slot // block_size, slot % block_size]
        row[0:head_size] = kv[i]
        row[state_width : state_width + head_size] = score[i] + ape[int(positions[i]) % compress_ratio, :head_size]


def window_entry(kv_rows: torch.Tensor, score_rows: torch.Tensor) -> torch.Tensor:
    """``sum_rows softmax_rows(score)[d] * kv[d]``: a softmax per dimension over rows."""
    weights = torch.softmax(score_rows.double(), dim=0)
    return (weights * kv_rows.double()).sum(dim=0).float()


def window_rows(p: int, compress_ratio: int, head_dim: int) -> list[tuple[int, slice]]:
    """The rows of the window closed at position ``p``: ``(position, columns)`` pairs.

    Ratio 128: positions p-127 .. p, columns 0:d. Ratio 4: positions p-7 .. p-4 with
    their first halves (0:d) and p-3 .. p with their second halves (d:2d); rows at
    positions below 0 weigh nothing, so they are left out.
    """
    d = head_dim
    if RATIOS[compress_ratio].overlap:
        previous = [(q, slice(0, d)) for q in range(p - 2 * compress_ratio + 1, p - compress_ratio + 1)]
        current = [(q, slice(d, 2 * d)) for q in range(p - compress_ratio + 1, p + 1)]
        return [(q, cols) for q, cols in previous + current if q >= 0]
    return [(q, slice(0, d)) for q in range(p - compress_ratio + 1, p + 1)]


def compress_windows_ref(
    state_cache: torch.Tensor,
    block_table: torch.Tensor,
    positions: torch.Tensor,
    req_indices: torch.Tensor,
    out: torch.Tensor,
    compress_ratio: int,
    head_dim: int,
    block_size: int,
) -> torch.Tensor:
    """In place on ``out``: each token that closes a window gets its entry; others untouched."""
    width = RATIOS[compress_ratio].state_width(head_dim)
    for i in range(positions.shape[0]):
        p, r = int(positions[i]), int(req_indices[i])
        if (p + 1) % compress_ratio != 0:
            continue
        kv_rows, score_rows = [], []
        for q, cols in window_rows(p, compress_ratio, head_dim):
            slot = int(block_table[r, q // block_size]) * block_size + q % block_size
            row = state_cache[slot // block_size, slot % block_size]
            kv_rows.append(row[cols])
            score_rows.append(row[width + cols.start : width + cols.stop])
        out[i, :head_dim] = window_entry(torch.stack(kv_rows), torch.stack(score_rows))
    return out


def compress_sequence_ref(
    kv: torch.Tensor, score: torch.Tensor, ape: torch.Tensor, compress_ratio: int, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every window of one request's token sequence, positions 0 .. T-1.

    ``kv``, ``score``: float32 ``[T, W]`` (``score`` before ``ape``); ``ape``:
    ``[compress_ratio, W]``. Returns the closing positions (int64 ``[windows]``) and the
    entries (float32 ``[windows, head_dim]``); window ``n`` closes at ``n * ratio + ratio - 1``.
    """
    tokens = kv.shape[0]
    positions = torch.arange(tokens, device=kv.device)
    states = score + ape[positions % compress_ratio]  # float32, as the store adds them
    closing = positions[(positions + 1) % compress_ratio == 0]
    entries = []
    for p in closing.tolist():
        rows = window_rows(p, compress_ratio, head_dim)
        kv_rows = torch.stack([kv[q, cols] for q, cols in rows])
        score_rows = torch.stack([states[q, cols] for q, cols in rows])
        entries.append(window_entry(kv_rows, score_rows))
    entries = torch.stack(entries) if entries else torch.empty(0, head_dim, device=kv.device)
    return closing, entries
