"""Where entries are read from: the cache directory, then installed cache wheels.

A cache wheel (``python -m jitkern.warmup pack``) is a read-only data folder in
site-packages, named by an entry point in the group ``jitkern.caches``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys

import triton

from jitkern.memo import file_stats, remembered

WHEEL_ENTRY_POINTS = "jitkern.caches"
WHEEL_DATA = "cache"
WHEEL_ROOTS_MEMO = "wheel-roots.json"




def read_roots() -> list[str]:
    """Where entries are read from, in order: the cache directory, then installed cache wheels."""
    return [triton.knobs.cache.dir, *wheel_roots()]


@functools.cache
def wheel_roots() -> tuple[str, ...]:
    """The read-only data folders of installed cache wheels (entry point group ``jitkern.caches``).

    Python finds entry points by reading every installed distribution's: 8 ms for 49
    distributions on our CPU machine, more with the hundreds of a serving image, in each
    process. So the answer is remembered per machine (``wheel-roots.json`` in
    ``JITKERN_STATE_DIR``), keyed by ``installed_distributions()``."""
    installed = installed_distributions()
    if installed is None:
        return _find_wheel_roots()
    roots = tuple(json.loads(remembered(WHEEL_ROOTS_MEMO, installed, lambda: json.dumps(_find_wheel_roots()))))
    return roots if all(map(os.path.isdir, roots)) else _find_wheel_roots()  # a wheel's folder deleted by hand


def installed_distributions() -> str | None:
    """sha256 of what Python reads to find entry points: each ``sys.path`` entry, its
    distributions' metadata folders and their ``entry_points.txt`` files' stats (another
    set of distributions, or a file rewritten, gives another digest). None when a finder
    other than Python's path finder may list distributions too."""
    from importlib.machinery import PathFinder

    if any(hasattr(finder, "find_distributions") and finder is not PathFinder for finder in sys.meta_path):
        return None
    digest = hashlib.sha256()
    for entry in sys.path:
        folder = entry or os.curdir
        try:
            names = sorted(child.name for child in os.scandir(folder) if _holds_metadata(child.name.lower()))
        except OSError:  # a zip file, or nothing there
            digest.update(repr((entry, file_stats([folder]))).encode())
            continue
        entry_points = [os.path.join(folder, name, "entry_points.txt") for name in names]
        digest.update(repr((entry, file_stats(entry_points))).encode())
    return digest.hexdigest()


def _holds_metadata(name: str) -> bool:
    """Whether Python's path finder reads a distribution's metadata from a folder so named."""
    return name.endswith((".dist-info", ".egg-info")) or name == "egg-info"


def _find_wheel_roots() -> tuple[str, ...]:
    from importlib.metadata import entry_points
    from importlib.util import find_spec

    roots = []
    for point in sorted(entry_points(group=WHEEL_ENTRY_POINTS), key=lambda point: point.name):
        spec = find_spec(point.value)
        for package in (spec.submodule_search_locations or []) if spec else []:
            if os.path.isdir(os.path.join(package, WHEEL_DATA)):
                roots.append(os.path.join(package, WHEEL_DATA))
    return tuple(roots)


