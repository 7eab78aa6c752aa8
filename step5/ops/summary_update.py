"""Step5 CSA region summaries: the three update paths (``docs/spec/step5-csa.md``).

A region is 8 positions of one request; the token at position ``p % 8 == 7`` closes it and
its summary (an fp32 online softmax of the 8 ``[key | z]`` rows with a scalar running
maximum, stored as fp8 e4m3 bytes) goes to ``mean``. Rows of still-open regions wait in
the tail ring (``step5.ring.Step5CSATailRing``).

One module per path holds its ``TritonJitKernel`` classes and the public functions, which
validate their arguments (shapes, dtypes, devices: never device values, so nothing
synchronises) and launch; the ``@triton.jit`` source of each path is in
``step5.ops.kernels``:

- ``step5.ops.decode``: one program per token (one token per request).
- ``step5.ops.prefill``: ``build_prefill_groups`` lists the step's closing tokens on the
  device, then ``update_prefill`` summarizes one region per program and stores open-region
  rows. Steps of at least 256 tokens take ``step5.ops.prefill_fused``: a build that writes
  every row itself, then summaries and ring writes in one launch.
- ``step5.ops.verify``: one program per request, its ``q`` tokens in position order.

Shared pieces: ``step5.ops.common`` and ``step5.ops.validate`` (host side),
``step5.ops.kernels.summary_math`` (Triton). This module gathers the public names;
importing it registers all seven kernels, so manifests name it. ``summary_layout`` and
``prefill_metadata_layout`` are the former names of ``summary_geometry`` and
``prefill_metadata_geometry``, kept for engines that call them.
"""

from step5.ops.common import prefill_metadata_geometry, summary_geometry
from step5.ops.decode import UpdateDecodeKernel, update_decode
from step5.ops.prefill import (
    GROUP_COLUMNS,
    BuildPrefillGroupsKernel,
    PrefillSummaryKernel,
    WriteRingKernel,
    build_prefill_groups,
    update_prefill,
)
from step5.ops.prefill_fused import BuildFilledPrefillGroupsKernel, PrefillUpdateKernel
from step5.ops.verify import UpdateVerifyKernel, update_verify

summary_layout = summary_geometry
prefill_metadata_layout = prefill_metadata_geometry

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
    "prefill_metadata_geometry",
    "prefill_metadata_layout",
    "summary_geometry",
    "summary_layout",
    "update_decode",
    "update_prefill",
    "update_verify",
]
