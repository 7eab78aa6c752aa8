"""Host nanoseconds of the tensor attribute reads a public call needs, on this machine
(CUDA tensors when there is a GPU). Helps price input validation against the launch."""

import timeit

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
t = torch.empty(64, 2, 256, dtype=torch.bfloat16, device=device)[:, 0]
number = 200_000
for expression in ["t.shape", "t.stride()", "t.dtype", "t.device", "t.get_device()", "t.is_cuda", "t.data_ptr()",
                   "t.stride(0)", "t.size(0)", "t.ndim", "(t.dtype, t.shape, t.stride(), t.get_device())",
                   "torch.cuda.current_stream().cuda_stream", "torch._C._cuda_getCurrentRawStream(0)"]:
    try:
        seconds = timeit.timeit(expression, globals=dict(t=t, torch=torch), number=number) / number
        print(f"{expression:55} {seconds * 1e9:7.0f} ns")
    except Exception as error:  # noqa: BLE001 (a CPU-only machine lacks the CUDA ones)
        print(f"{expression:55} {type(error).__name__}")
