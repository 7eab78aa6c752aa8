"""Step5 kernels: one module per update path of the CSA summaries (``decode``, ``prefill``,
``verify``); ``summary_update`` gathers their public functions and registers all five kernels."""
