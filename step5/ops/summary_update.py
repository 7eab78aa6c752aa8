"""Step5 CSA region summaries: the public names of the three update paths
(``docs/spec/step5-csa.md``) gathered; importing it registers all seven kernels, so
manifests name it. ``summary_layout`` and ``prefill_metadata_layout`` are the former names
of ``summary_geometry`` and ``prefill_metadata_geometry``.
"""

from step5.ops.common import prefill_metadata_geometry, summary_geometry
from step5.ops.decode import UpdateDecodeKernel, update_decode
from step5.ops.prefill import (GROUP_COLUMNS, BuildPrefillGroupsKernel, PrefillSummaryKernel, WriteRingKernel,
                               build_prefill_groups, update_prefill)
from step5.ops.prefill_fused import BuildFilledPrefillGroupsKernel, PrefillUpdateKernel
from step5.ops.verify import UpdateVerifyKernel, update_verify

summary_layout = summary_geometry
prefill_metadata_layout = prefill_metadata_geometry

__all__ = ["GROUP_COLUMNS", "BuildFilledPrefillGroupsKernel", "BuildPrefillGroupsKernel", "PrefillSummaryKernel",
           "PrefillUpdateKernel", "UpdateDecodeKernel", "UpdateVerifyKernel", "WriteRingKernel", "build_prefill_groups",
           "prefill_metadata_geometry", "prefill_metadata_layout", "summary_geometry", "summary_layout", "update_decode",
           "update_prefill", "update_verify"]
