"""A serving process's start: every binary of its deployment loaded, compiling nothing.

- ``load``: ``load()``, the binaries taken from the cache onto this GPU.
- ``memo``: ``load()`` remembered per deployment, so a restart skips Triton's front end.
- ``compiled``: Triton's objects for a remembered binary.
- ``rehearsal``: each kernel's launch rehearsed, so the first request runs warm code.
"""

from jitkern.serve.load import LoadedKernel, MissingBinary, NoGPU, TuningTableWarning, load, start_process

__all__ = ["LoadedKernel", "MissingBinary", "NoGPU", "TuningTableWarning", "load", "start_process"]
