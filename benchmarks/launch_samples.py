"""Small, realistic calls of every shipped kernel, for launch-cost benchmarks and checks."""

from __future__ import annotations

import torch

from jitkern.examples.axpy import axpy


def drive_axpy(device: str) -> None:
    x = torch.randn(4096, device=device)
    axpy(x, torch.randn_like(x), 2.0)


def drive_all(device: str) -> None:
    drive_axpy(device)
