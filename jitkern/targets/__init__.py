"""GPU targets: naming them, what kernels may use on each, and compiling for one anywhere.

- **Names** (``names``): ``cuda:90``, ``hip:gfx942``; ``parse_target`` gives Triton's
  ``GPUTarget``, ``parse_targets`` checks a comma-separated list.
- **What a kernel may use** (``features``): ``current()`` is the target Triton compiles for
  now, with whether inline PTX, a capability and programmatic dependent launch (PDL) are
  there. ``JITKERN_PORTABLE_PATHS=1`` answers "no" to all of them on any GPU.
- **Compiling with no GPU** (``drivers``): ``compile_only(target)``.
- **AMD cache keys** free of Triton's install path (``amd_key``).
"""

from jitkern.targets.amd_key import AMD_KEY, amd_libraries_digest, install_path_free_amd_key
from jitkern.targets.drivers import CompileOnlyDriver, NoGPU, compile_only, compiling_only, gpu_name, local_target
from jitkern.targets.features import INTERPRETER, NO_TARGET, Target, current, fit_launch_options, target_of
from jitkern.targets.names import COMPILABLE, SUPPORTED_TARGETS, parse_target, parse_targets, target_name

__all__ = ["AMD_KEY", "COMPILABLE", "INTERPRETER", "NO_TARGET", "SUPPORTED_TARGETS", "CompileOnlyDriver", "NoGPU", "Target",
           "amd_libraries_digest", "compile_only", "compiling_only", "current", "fit_launch_options", "gpu_name",
           "install_path_free_amd_key", "local_target", "parse_target", "parse_targets", "target_name", "target_of"]
