"""PyTorch references of the example kernels, written from their specs, not from the kernels."""

from __future__ import annotations

import torch


def grouped_gemm(a: torch.Tensor, b: torch.Tensor, topk_ids: torch.Tensor,
                 topk_weights: torch.Tensor | None = None) -> torch.Tensor:
    """``c[m, j, :] = (a[m, :] @ b[topk_ids[m, j]].T) * topk_weights[m, j]`` (times 1 when no
    weights), in float32, returned in a's dtype: every token against every expert, then
    each token's experts picked out (``[M, E, N]`` floats in between)."""
    every = torch.einsum("mk,enk->men", a.float(), b.float())
    c = every.gather(1, topk_ids.long()[:, :, None].expand(-1, -1, b.shape[1]))
    if topk_weights is not None:
        c = c * topk_weights.float()[:, :, None]
    return c.to(a.dtype)
