"""Target names: ``cuda:<compute capability>`` and ``hip:<gfx arch>``, checked against what
Triton 3.6.0 compiles for."""

from __future__ import annotations

import re

from triton.backends.compiler import GPUTarget

SUPPORTED_TARGETS = ("cuda:80", "cuda:86", "cuda:89", "cuda:90", "cuda:100", "cuda:120", "hip:gfx942", "hip:gfx950")
"""The targets every shipped kernel is compiled for in CI; others of ``COMPILABLE`` may work."""

COMPILABLE = {
    "cuda": (70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121),
    "hip": ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1150", "gfx1151",
            "gfx1200", "gfx1201", "gfx1250"),
}
"""The architectures Triton 3.6.0 compiles for, each checked by compiling the example kernel.
Another name of the same form fails every key: a CUDA capability its ptxas does not list
(``cuda:88``, ``cuda:999``: an LLVM error ends the worker), an AMD arch its backend has no
ISA family for (``hip:gfx940``, ``hip:gfx000``: ``unsupported target``, with pages of IR),
so ``parse_target`` refuses it up front."""

_CUDA = re.compile(r"cuda:([0-9]{2,3})")
_HIP = re.compile(r"hip:(gfx([0-9]{1,2})[0-9a-f]{2})")


def parse_target(text: str) -> GPUTarget:
    """``cuda:90`` -> ``GPUTarget("cuda", 90, 32)``, ``hip:gfx942`` -> ``GPUTarget("hip",
    "gfx942", 64)`` (a wavefront of 64 before gfx10, as Triton's AMD backend has it);
    anything else, or an architecture not in ``COMPILABLE``, is a ``ValueError``."""
    if not isinstance(text, str):
        raise ValueError(f"target {text!r}: expected a string such as cuda:90 or hip:gfx942")
    name = text.strip()
    if match := _CUDA.fullmatch(name):
        target = GPUTarget("cuda", int(match.group(1)), 32)
    elif match := _HIP.fullmatch(name):
        target = GPUTarget("hip", match.group(1), 64 if int(match.group(2)) < 10 else 32)
    else:
        raise ValueError(f"target {text!r}: expected cuda:<compute capability> (e.g. cuda:90) "
                         f"or hip:<gfx arch> (e.g. hip:gfx942)")
    known = COMPILABLE[target.backend]
    if target.arch not in known:
        raise ValueError(f"target {text!r}: Triton 3.6.0 compiles for no such GPU; its {target.backend} targets: "
                         + ", ".join(f"{target.backend}:{arch}" for arch in known))
    return target


def parse_targets(text: str) -> list[str]:
    """``"cuda:90,hip:gfx942"`` -> their names, each checked, duplicates dropped, order kept."""
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise ValueError(f"--target {text!r}: an empty name in the list; expected e.g. cuda:80,cuda:90,hip:gfx942")
    return list(dict.fromkeys(target_name(parse_target(part)) for part in parts))


def target_name(target: GPUTarget) -> str:
    return f"{target.backend}:{target.arch}"


