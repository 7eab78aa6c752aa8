"""The Triton bodies of jitkern's examples, apart from their declarations (moving a body moves its cache key)."""
