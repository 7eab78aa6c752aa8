"""``kernel_launcher``: the decorator that makes a kernel's ``__call__`` launch the spec it builds."""

from __future__ import annotations

import functools
from typing import Any, Callable

from jitkern.launch.plans import recording
from jitkern.launch.spec import LaunchSpec, active_launch


def kernel_launcher(build: Callable[..., LaunchSpec]) -> Callable[..., Any]:
    """Decorate a ``__call__`` that returns a ``LaunchSpec``: calling it launches.

    A ``__call__`` whose first argument is ``compile_key`` receives the key jitkern reads
    from the call as the kernel's ``CompileKey`` declares (``jitkern.kernel.declare``), and
    leaves the spec's ``key`` out. The undecorated function stays reachable as
    ``launch_spec`` so that warmup runs the very same code on stand-in inputs.
    """

    @functools.wraps(build)
    def launch(self: Any, *args: Any, **kwargs: Any) -> Any:  # the kernel
        if active_launch.faking:  # a torch op's fake implementation: nothing launches
            return None
        spec = build(self, *args, **kwargs)
        launched = self.launch(spec)
        if recording.launches is not None:  # a public call records its launches (jitkern.launch.plans)
            recording.launches.append((self, spec, launched))
        return spec.result

    launch.launch_spec = build
    return launch
