"""On the GPU only: every shipped kernel writes the same bytes through its direct launch
as through Triton's ``kernel[grid](...)`` (``JITKERN_TEST_MODE=gpu``)."""

from pathlib import Path

import pytest
import torch

from jitkern.kernel import TritonJitKernel

pytestmark = pytest.mark.gpu


def test_the_direct_launch_writes_what_triton_s_launch_writes(monkeypatch):
    """Each sampled launch, with the memory its tensors held just before it, runs again
    through Triton and then through the key's direct launch, each from that memory
    restored in place (same addresses, same strides); every tensor argument must end with
    the same bytes both times."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[3]))
    from benchmarks import launch_samples

    launches, launch = [], TritonJitKernel.launch

    def launch_keeping_memory(kernel, spec):
        tensors = {name: value for name, value in spec.kwargs.items() if isinstance(value, torch.Tensor)}
        launches.append((kernel, spec, {name: tensor.clone() for name, tensor in tensors.items()}))
        launch(kernel, spec)

    with monkeypatch.context() as patch:
        patch.setattr(TritonJitKernel, "launch", launch_keeping_memory)
        launch_samples.drive_all("cuda")  # also gives every key its direct launch
    assert {kernel.name for kernel, _, _ in launches} >= {"deepseek_v4.compress_windows", "step5.update_verify"}
    for kernel, spec, before in launches:
        direct = kernel.binaries.direct_launch(spec)

        def bytes_after(run) -> dict[str, torch.Tensor]:
            for name, saved in before.items():
                spec.kwargs[name].copy_(saved)
            run()
            return {name: spec.kwargs[name].contiguous().view(torch.uint8).clone() for name in before}

        through_triton = bytes_after(lambda: kernel.kernel[spec.grid](**kernel.triton_kwargs(spec)))
        through_direct = bytes_after(lambda: direct.launch(spec.kwargs, spec.grid) or pytest.fail("not direct"))
        for name in before:
            assert torch.equal(through_direct[name], through_triton[name]), (kernel.describe(spec.key), name)
