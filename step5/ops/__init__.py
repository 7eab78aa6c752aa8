"""Step5 kernels: ``summary_update`` holds the three update paths of the CSA summaries."""
