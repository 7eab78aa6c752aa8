"""Probe: what a fresh 27 x 3 int32 output costs on the H200's host, by route (dropped
after each call, as a public call's caller drops it, and kept)."""
import time
import torch
dev = torch.device("cuda", 0)
torch.empty(1, device=dev)
torch.cuda.synchronize()
n = 27
i32 = torch.int32
template = torch.empty(n, 3, dtype=i32, device=dev)
stride0 = torch.empty(1, 1, dtype=i32, device=dev).expand(n, 3)
empty = torch.empty
cands = {
    "empty(n,3,dtype,device=dev)": lambda: empty(n, 3, dtype=i32, device=dev),
    "empty(n,3,dtype,device=0)": lambda: empty(n, 3, dtype=i32, device=0),
    "empty(n,3,dtype,device='cuda:0')": lambda: empty(n, 3, dtype=i32, device="cuda:0"),
    "empty((n,3),dtype,device=dev)": lambda: empty((n, 3), dtype=i32, device=dev),
    "empty_like(template)": lambda: torch.empty_like(template),
    "empty_like(stride-0 template)": lambda: torch.empty_like(stride0),
    "template.new_empty((n,3))": lambda: template.new_empty((n, 3)),
    "empty_strided": lambda: torch.empty_strided((n, 3), (3, 1), dtype=i32, device=dev),
    "template[0] (a view)": lambda: template[0],
}
def timed(f, keep):
    best = []
    for rep in range(7):
        kept = []
        t0 = time.perf_counter()
        if keep:
            for _ in range(2000):
                kept.append(f())
        else:
            for _ in range(2000):
                f()
        best.append((time.perf_counter() - t0) / 2000 * 1e6)
        del kept
    return sorted(best)[3]
with torch.inference_mode():
    inference = timed(cands["empty(n,3,dtype,device=dev)"], False)
print(f"{'route':36s} {'dropped us':>10s} {'kept us':>8s}")
for name, f in cands.items():
    print(f"{name:36s} {timed(f, False):10.3f} {timed(f, True):8.3f}")
print(f"{'empty(...) in inference_mode':36s} {inference:10.3f}")
