"""What the store and the compressor share: the spec's table of compression ratios, once
(so that warmup keys, validation and launchers cannot disagree on a width or a block
size), the float dtype, the engine's PDL request, the manifest config that warms them,
the tensor arguments, and what the compressor and the fused decode step declare alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from jitkern import Config, Tensor, TritonJitKernel, Warm, argument, dtype_of
from jitkern.kernel.arguments import Arg
from jitkern.kernel.validation import INDEX_DTYPES, INDEX_DTYPES_BY_NAME, device_has_pdl, use_gdc


@dataclass(frozen=True)
class RatioGeometry:
    """One row of the spec's table: how a compression ratio shapes its states."""

    ratio: int
    overlap: bool  # ratio 4: a token's first half serves the next window
    block_size: int  # rows per block of the paged state cache

    def state_width(self, head_dim: int) -> int:
        """``W``: the width of one half of a state row (``[kv (W) | score + ape (W)]``)."""
        return (2 if self.overlap else 1) * head_dim


RATIOS = {
    4: RatioGeometry(ratio=4, overlap=True, block_size=4),
    128: RatioGeometry(ratio=128, overlap=False, block_size=8),
}

FLOAT_DTYPE = torch.float32


def ratio_geometry(compress_ratio: Any) -> RatioGeometry:
    """The geometry of ``compress_ratio``; anything but 4 or 128 is a ``ValueError``."""
    geometry = RATIOS.get(compress_ratio) if isinstance(compress_ratio, int) else None
    if geometry is None:
        raise ValueError(f"compress_ratio: must be one of {sorted(RATIOS)}, got {compress_ratio!r}")
    return geometry


def key_width(key: Any) -> int:
    """``W`` of a compile key with ``compress_ratio`` and ``head_dim`` fields."""
    return ratio_geometry(key.compress_ratio).state_width(key.head_dim)


# A deployment's config (a manifest entry's): its geometry, the index dtypes its engine passes, PDL.
COMPRESS_RATIO = Config("compress_ratio", int, choices=tuple(RATIOS))
HEAD_DIM = Config("head_dim", int, choices=range(1, 2**31))
INDEX_DTYPE_NAMES = Config("index_dtypes", list[str], default=["int32", "int64"], choices=tuple(INDEX_DTYPES_BY_NAME))
LAUNCH_PDL = Config("launch_pdl", bool, default=False)
BLOCK_SIZE = Warm(lambda compress_ratio: [RATIOS[compress_ratio].block_size], COMPRESS_RATIO)  # the spec's table
STATE_WIDTH = Warm(lambda head_dim, compress_ratio: [RATIOS[compress_ratio].state_width(head_dim)], HEAD_DIM,
                   COMPRESS_RATIO)


def resolve_pdl(pdl_kwargs: dict | None, device: torch.device) -> bool:
    """Whether to launch with programmatic dependent launch: ``pdl_kwargs`` is what an engine
    passes along (``{"launch_pdl": True}`` or empty). Where the GPU has no PDL
    (``device_has_pdl``: older GPUs, AMD, the CPU interpreter) the request is dropped rather
    than failing, so one engine config runs everywhere."""
    launch_pdl = pdl_kwargs.get("launch_pdl", False) if isinstance(pdl_kwargs, dict) else None
    if pdl_kwargs is not None and (not isinstance(pdl_kwargs, dict) or set(pdl_kwargs) - {"launch_pdl"}
                                   or not isinstance(launch_pdl, bool)):  # bool("no") is True: it would ask for PDL
        raise ValueError(f"pdl_kwargs: expected {{'launch_pdl': True or False}}, or None, got {pdl_kwargs!r}")
    return bool(launch_pdl) and device_has_pdl(device)


def floats(shape: str, written: bool = False) -> Arg:
    """A float32 tensor argument whose last dimension is dense (the rows may be strided)."""
    return Arg(shape, FLOAT_DTYPE, strides=["_"] * (len(shape.split()) - 1) + [1], written=written)


def projection_views(width: Callable[[Any], int]) -> dict[str, Tensor]:
    """The store's usual ``kv`` and ``score``: views of one ``[tokens, 2W]`` projection, score
    at column W (16-byte aligned only where 4W bytes are); ``ape`` ``[compress_ratio, W]``."""
    return dict(kv=Tensor((1, width), "dtype", strides=(lambda key: 2 * width(key), 1)),
                score=Tensor((1, width), "dtype", strides=(lambda key: 2 * width(key), 1),
                             aligned=lambda key: 4 * width(key) % 16 == 0),
                ape=Tensor(("compress_ratio", width), "dtype", varying=()))


INDEX = Arg("tokens", INDEX_DTYPES, contiguous=True)  # positions, slot_mapping, req_indices
POSITIVE = range(1, 2**31)  # an int argument: a size


@dataclass(frozen=True, kw_only=True)
class WindowKey:
    """The first key fields of the compressor and the fused decode step: the window's
    geometry and the dtypes of the tensors both read."""

    compress_ratio: int = argument("compress_ratio", constexpr="COMPRESS_RATIO", warm=COMPRESS_RATIO)
    head_dim: int = argument("head_dim", constexpr="HEAD_DIM", warm=HEAD_DIM)
    block_size: int = argument("block_size", constexpr="BLOCK_SIZE", warm=BLOCK_SIZE)
    dtype: str = dtype_of("state_cache", warm=[FLOAT_DTYPE])  # every float tensor's (the public functions check)
    block_table_dtype: str = dtype_of("block_table", warm=[torch.int32])
    positions_dtype: str = dtype_of("positions", warm=INDEX_DTYPE_NAMES)  # int32 or int64: different binaries


class WindowKernel(TritonJitKernel):
    """A kernel computing window entries (the compressor, the fused decode step): the usual
    layouts of the tensors both take, and the constants that follow from the geometry."""

    stand_ins = dict(state_cache=Tensor((1, "block_size", lambda key: 2 * key_width(key))), positions=Tensor((1,)),
                     block_table=Tensor((1, 16), varying=(0, 1)),  # max_blocks varies with the context length
                     req_indices=Tensor((1,)), out=Tensor((1, "head_dim"), "dtype"))

    def constants(self, key: Any) -> dict[str, Any]:
        geometry = ratio_geometry(key.compress_ratio)
        return {**super().constants(key), "STATE_WIDTH": geometry.state_width(key.head_dim),
                "OVERLAP": geometry.overlap, "USE_GDC": use_gdc(key.launch_pdl)}

