"""Step5 kernels: one module per update path of the CSA summaries (``decode``, ``prefill``,
``verify``; ``prefill_fused``, prefill in two launches), their Triton source in ``kernels``;
``summary_update`` gathers their public functions and registers all seven kernels."""
