"""Where the host time of one direct launch goes (micro-timings of its parts, on the GPU)."""

import timeit

import torch
from triton.runtime.driver import driver

from jitkern.examples.axpy import AxpyKernel

kernel = AxpyKernel()
x = torch.randn(4096, device="cuda")
y, out = torch.randn_like(x), torch.empty_like(x)
kernel(x, y, out, 2.0)
spec = kernel.launch_spec(x, y, out, 2.0)
direct = kernel.binaries.direct_launch(spec)
print(direct.source)
binder = kernel.kernel.device_caches[driver.active.get_current_device()][4]
triton_kwargs = kernel.triton_kwargs(spec)
bound, specialization, _ = binder(**triton_kwargs)
args = tuple(bound.values())
pointer_args = tuple(arg.data_ptr() if isinstance(arg, torch.Tensor) else arg for arg in args)
binary = direct.binary
stream = driver.active.get_current_stream(0)
N = 20000
parts = {
    "full call kernel(...)": lambda: kernel(x, y, out, 2.0),
    "launch_spec(...)": lambda: kernel.launch_spec(x, y, out, 2.0),
    "kernel.launch(spec)": lambda: kernel.launch(spec),
    "direct.launch(kwargs, grid)": lambda: direct.launch(spec.kwargs, spec.grid),
    "Triton's binder(**kwargs)": lambda: binder(**triton_kwargs),
    "driver.active.get_current_device()": lambda: driver.active.get_current_device(),
    "torch._C._cuda_getDevice()": torch._C._cuda_getDevice,
    "driver.active.get_current_stream(0)": lambda: driver.active.get_current_stream(0),
    "x.data_ptr()": x.data_ptr,
    "x.dtype, x.is_cuda": lambda: (x.dtype, x.is_cuda),
    "x.numel()": lambda: x.numel(),
    "dispatch (memoised)": lambda: kernel.dispatch(dtype=x.dtype, block_size=1024),
    "bare binary.run (tensors)": lambda: binary.run(4, 1, 1, stream, binary.function, binary.packed_metadata, None,
                                                    None, None, *args),
    "bare binary.run (int pointers)": lambda: binary.run(4, 1, 1, stream, binary.function, binary.packed_metadata,
                                                         None, None, None, *pointer_args),
    "C launch function (int pointers)": lambda: binary.run.launch(
        4, 1, 1, stream, binary.function, binary.run.launch_cooperative_grid, binary.run.launch_pdl, None, None,
        binary.packed_metadata, None, None, None, *pointer_args),
    "triton kernel[grid]": lambda: kernel.kernel[spec.grid](**triton_kwargs),
}
for name, part in parts.items():
    torch.cuda.synchronize()
    print(f"{name:40} {timeit.timeit(part, number=N) / N * 1e6:7.2f} us")
    torch.cuda.synchronize()

# Where warm start goes: profile load() of the example manifest in this process.
import cProfile  # noqa: E402
import pstats  # noqa: E402

from jitkern.serve import load  # noqa: E402

kernel.binaries.forget()
profile = cProfile.Profile()
profile.enable()
loaded = load(["warmup_manifests/jitkern-example.json"])
profile.disable()
print(loaded)
pstats.Stats(profile).sort_stats("cumulative").print_stats(18)
