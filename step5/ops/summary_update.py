"""Step5 CSA region summaries: the three update paths (``docs/spec/step5-csa.md``).

A region is 8 positions of one request; the token at position ``p % 8 == 7`` closes it and
its summary (an fp32 online softmax of the 8 ``[key | z]`` rows with a scalar running
maximum, stored as fp8 e4m3 bytes) goes to ``mean``. Rows of still-open regions wait in
the tail ring (``step5.ring.Step5CSATailRing``).

One module per path, each with its ``@triton.jit`` functions, their ``TritonJitKernel``
classes right below them, and the public functions, which validate their arguments
(shapes, dtypes, devices: never device values, so nothing synchronises) and launch:

- ``step5.ops.decode``: one program per token (one token per request).
- ``step5.ops.prefill``: ``build_prefill_groups`` lists the step's closing tokens on the
  device, then ``update_prefill`` summarizes one region per program and stores open-region
  rows. Steps of at least 256 tokens take ``step5.ops.prefill_fused``: a build that writes
  every row itself, then summaries and ring writes in one launch.
- ``step5.ops.verify``: one program per request, its ``q`` tokens in position order.

Shared pieces: ``step5.ops._rows`` (host side) and ``step5.ops._summary_math`` (Triton).
This module gathers the public names; importing it registers all seven kernels, so
manifests name it.
"""

from step5.ops._rows import summary_layout
from step5.ops.decode import UpdateDecodeKernel, _update_decode_kernel, update_decode
from step5.ops.prefill import (
    GROUP_COLUMNS,
    BuildPrefillGroupsKernel,
    PrefillSummaryKernel,
    WriteRingKernel,
    _build_prefill_groups_kernel,
    _prefill_summary_kernel,
    _write_ring_kernel,
    build_prefill_groups,
    prefill_metadata_layout,
    update_prefill,
)
from step5.ops.prefill_fused import (
    BuildFilledPrefillGroupsKernel,
    PrefillUpdateKernel,
    _build_prefill_groups_filled_kernel,
    _prefill_update_kernel,
)
from step5.ops.verify import UpdateVerifyKernel, _update_verify_kernel, update_verify

__all__ = [
    "GROUP_COLUMNS",
    "BuildFilledPrefillGroupsKernel",
    "BuildPrefillGroupsKernel",
    "PrefillSummaryKernel",
    "PrefillUpdateKernel",
    "UpdateDecodeKernel",
    "UpdateVerifyKernel",
    "WriteRingKernel",
    "build_prefill_groups",
    "prefill_metadata_layout",
    "summary_layout",
    "update_decode",
    "update_prefill",
    "update_verify",
]
