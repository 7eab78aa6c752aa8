"""Tuned once per GPU kind, shipped with the cache: tuning tables and the ``tune`` step.

A kernel declares its tuning space (``jitkern.kernel.tuning``); warmup builds every
candidate. Here:

- ``table``: a tuning table (JSON, a pydantic schema), per kernel, target and GPU name,
  with the Triton build and kernel source it was measured with; stale when they differ.
- ``deployment``: a deployment's tuned buckets, the tables a load takes, the keys it
  loads (winners and defaults only), ``tune --check``'s lines.
- ``tune``: timing each bucket's candidates on a GPU (a pluggable timer; ``CudaTimer``),
  the winner by a fixed rule.
- ``vllm``: vLLM's tuned fused-MoE JSON files in and out.

Tables are cache artifacts (``jitkern.cache.tables``): locked, packed, published and
trusted as binaries are.
"""

from jitkern.tuning.deployment import (check_tables, read, serving_entries, table_files, take_tables, tuned_buckets,
                                      tuned_kernel)
from jitkern.tuning.table import Row, Table, TableError, TableSchema, kernel_source, staleness, store, table_of
from jitkern.tuning.tune import NOISE, CudaTimer, Timer, TuneError, tune, winner
from jitkern.tuning.vllm import export_vllm, import_vllm, vllm_gpu

__all__ = ["NOISE", "CudaTimer", "Row", "Table", "TableError", "TableSchema", "Timer", "TuneError", "check_tables",
           "export_vllm", "import_vllm", "kernel_source", "read", "serving_entries", "staleness", "store",
           "table_files", "table_of", "take_tables", "tune", "tuned_buckets", "tuned_kernel", "vllm_gpu", "winner"]
