"""The cache as a deployment artifact: whole entries, who made it, trust, shipping.

- ``entries``: a Triton cache entry checked whole.
- ``roots``: where entries are read from (the cache directory, installed cache wheels).
- ``lock``: a deployment's lock, every file's sha256.
- ``remote``: a Redis server as a shared tier of entries.
- ``trust``: which entries this process may load; the Redis tier read through.
- ``manager``: Triton's cache manager handing out whole, trusted entries only.
- ``identity``: which compilers made a cache.
- ``share``: writing a cache's lock, publishing it to Redis, checking what Redis holds.
- ``wheel``: a deployment's cache packed as a wheel.
"""

from jitkern.cache.entries import CacheEntryUnusable, DamagedCacheEntry
from jitkern.cache.manager import JitkernCacheManager, install, refusing_compiles
from jitkern.cache.trust import RefusedCacheEntry, RemoteCacheUnavailable

__all__ = ["CacheEntryUnusable", "DamagedCacheEntry", "JitkernCacheManager", "RefusedCacheEntry",
           "RemoteCacheUnavailable", "install", "refusing_compiles"]
