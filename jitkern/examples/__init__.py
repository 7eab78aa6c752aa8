"""Kernels of jitkern's own, small enough to read in one sitting."""
