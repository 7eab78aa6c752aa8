"""Step5 CSA region summaries (``docs/spec/step5-csa.md``) as jitkern kernels.

``Step5CSATailRing`` keeps the rows of open regions; ``Step5SparseSummaryCache`` writes the
fp8 summary of each closed region through ``step5.ops.summary_update``;
``Step5SummaryCacheSpec`` describes the summary layer to an engine."""

from step5.cache import Step5SparseSummaryCache, Step5SummaryCacheSpec
from step5.ring import RingFullError, Step5CSATailRing, Step5RingMetadata

__all__ = ["RingFullError", "Step5CSATailRing", "Step5RingMetadata", "Step5SparseSummaryCache", "Step5SummaryCacheSpec"]
