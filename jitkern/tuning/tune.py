"""Tuning on a GPU: each bucket's candidates timed on the bucket's real inputs, the winner
chosen by a fixed rule, a table per kernel.

For each bucket of each tuned kernel of a deployment (``jitkern.tuning.deployment``), each
candidate's key is launched on the bucket's inputs: the launch a random call of the space's
public function (``calls``) makes with the candidate tried for the bucket, or the inputs
its ``inputs(key, device, **selectors)`` makes, through ``spec_for`` (the candidate itself,
whatever a table says); and timed by a **timer**: ``timer(launch, key)`` returns the seconds of each sample.
The timer is pluggable: ``CudaTimer`` on a GPU; tests pass one that returns set times,
with the interpreter's or a dry run's launches. Nothing compiles: a candidate the cache
lacks is ``CacheEntryUnusable`` (warm it first).

**The rule**: a candidate's time is the median of its samples; those within ``NOISE`` of
the fastest tie, and the first of them in the space's order wins. So noise between two
equal candidates never flips a table, and the order the space declares is a preference.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
from dataclasses import dataclass
from typing import Any, Callable

from jitkern import settings
from jitkern.cache.entries import CacheEntryUnusable
from jitkern.cache.manager import refusing_compiles
from jitkern.kernel import registry
from jitkern.kernel.arguments import Arg
from jitkern.kernel.calls import NoCallFor
from jitkern.kernel.recording import record_launches
from jitkern.kernel.tuning import config_name
from jitkern.launch.spec import LaunchSpec
from jitkern.layouts.binary_key import key_name
from jitkern.manifest import Deployment
from jitkern.tuning.deployment import Bucket, candidate_key, read, tuned_buckets
from jitkern.tuning.table import Row, Table, staleness, table_of

NOISE = 0.02  # medians within 2% of the fastest tie: run-to-run noise on one GPU is about 1%

Timer = Callable[[Callable[[], Any], Any], list[float]]
"""``timer(launch, key)``: the seconds each sample of ``launch()`` (candidate ``key``) took."""


class TuneError(RuntimeError):
    """Tuning cannot go on; one line naming the kernel and key."""


@dataclass(frozen=True)
class CudaTimer:
    """GPU time per launch: CUDA events around one replay of a CUDA graph of ``launches``
    launches (the kernel alone, with no host time between them), ``repeats`` samples, after
    ``warmups`` eager launches; ``graph=False``: events around one eager launch a sample."""

    warmups: int = 10
    repeats: int = 30
    launches: int = 10
    graph: bool = True

    def __call__(self, launch: Callable[[], Any], key: Any) -> list[float]:
        import torch

        for _ in range(self.warmups):
            launch()
        torch.cuda.synchronize()
        sample, per_sample = launch, 1
        if self.graph:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(self.launches):
                    launch()
            sample, per_sample = graph.replay, self.launches
        seconds = []
        for _ in range(self.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            sample()
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3 / per_sample)
        return seconds

    def describe(self) -> str:
        how = (f"a CUDA graph of {self.launches} launches" if self.graph else "one eager launch")
        return (f"median of {self.repeats} samples of {how} (CUDA events) after {self.warmups} warm-up launches; "
                f"within {NOISE:.0%} of the fastest, the first candidate declared wins")


def winner(medians: list[float]) -> int:
    """The index of the winning candidate (see the module docstring's rule)."""
    fastest = min(medians)
    return next(index for index, median in enumerate(medians) if median <= fastest * (1 + NOISE))


def tune(deployment: Deployment, target: str, gpu: str, timer: Timer, device: Any = "cuda",
         on_bucket: Callable[[str, int, int], None] = lambda kernel, done, total: None) -> list[Table]:
    """A table per tuned kernel of ``deployment``: every bucket's candidates timed here by
    ``timer`` (see the module docstring), each table merged with the rows of this GPU's
    table already in the caches for other buckets when that one is not stale. Writes
    nothing (``jitkern.tuning.store``); ``on_bucket(kernel, done, total)`` after each bucket."""
    tables = []
    refusing = contextlib.nullcontext() if settings.interpreting() else refusing_compiles()
    with refusing:
        for name, buckets in tuned_buckets(deployment).items():
            kernel = registry.get_kernel(name)
            if kernel.winners.space.inputs is None and kernel.winners.space.calls is None:
                raise TuneError(f"{name}: its TuningSpace names no public function (calls=) nor inputs(key, device, "
                                "**selectors) to time its candidates on")
            rows = []
            for done, bucket in enumerate(buckets, 1):
                rows.append(_tune_bucket(kernel, bucket, timer, device))
                on_bucket(name, done, len(buckets))
            table = table_of(kernel, target, gpu, rows, _timer_name(timer))
            previous, _problem = read(kernel, target, gpu)
            if previous is not None and staleness(previous, kernel, gpu) is None:
                table = previous.merged(table)
            tables.append(table)
    return tables


def _tune_bucket(kernel: Any, bucket: Bucket, timer: Timer, device: Any) -> Row:
    winners = kernel.winners
    medians = []
    drawn: dict[tuple, dict[str, Any]] = {}  # one random call per optional tensors left out: every candidate's inputs
    for config in winners.candidates:
        key = candidate_key(bucket, config)
        if winners.space.calls is not None:
            spec = _launch_of_call(kernel, bucket, config, key, device, drawn)
        else:
            spec = kernel.spec_for(key, **winners.space.inputs(key, device, **bucket.selectors))
        if spec.key != key:
            raise TuneError(f"{kernel.name}: its tuning inputs for [{key_name(key)}] launch [{key_name(spec.key)}]")
        try:
            if not settings.interpreting():  # its binary from the cache, as load() takes it: compiling none
                kernel.compile(kernel.layouts.binary_key(spec))
            medians.append(statistics.median(timer(lambda: kernel.launch(spec), key)))
        except CacheEntryUnusable as error:
            raise TuneError(f"{kernel.name}[{key_name(key)}]: {error.problem}; tuning compiles nothing: warm the "
                            "manifests for this target first") from None
    best = winner(medians)
    return Row(dict(zip(winners.bucket_names, bucket.values)), dict(winners.candidates[best]),
               {config_name(config): round(median * 1e6, 3) for config, median in zip(winners.candidates, medians)})


def _launch_of_call(kernel: Any, bucket: Bucket, config: dict[str, Any], key: Any, device: Any,
                    drawn: dict[tuple, dict[str, Any]]) -> LaunchSpec:
    """The launch of ``kernel`` a random call of its space's public function makes with
    ``config`` tried for the bucket, recorded and not run. Which optional tensors the call
    gives is tried in turn, all of them first, until the launch has ``key`` (a field such as
    "routed weights given" is computed, not inverted). ``drawn``: the bucket's calls so far,
    by the optional tensors they leave out, so that every candidate runs on the same inputs."""
    calls = kernel.winners.space.calls
    optional = [name for name, declared in (kernel.arguments.arguments if kernel.arguments else {}).items()
                if isinstance(declared, Arg) and declared.optional]
    launched = []
    with kernel.winners.trying(bucket.values, config):
        for count in range(len(optional) + 1):
            for absent in itertools.combinations(optional, count):
                if absent not in drawn:
                    try:
                        drawn[absent] = kernel.random_call(key, bucket.selectors, absent, device)
                    except NoCallFor as error:
                        raise TuneError(f"{kernel.name}: no call of {calls.__name__} for [{key_name(key)}]: {error}; "
                                        "declare the size's field or selector, or write inputs=") from None
                with record_launches(dry_run=True) as launches:
                    calls(**drawn[absent])
                specs = [spec for launching, spec in launches if launching is kernel]
                if specs and specs[0].key == key:
                    return specs[0]
                launched += [key_name(spec.key) for spec in specs[:1]]
    raise TuneError(f"{kernel.name}: random calls of {calls.__name__} for [{key_name(key)}] launch "
                    f"{', '.join(f'[{name}]' for name in dict.fromkeys(launched)) or 'nothing of it'}")


def _timer_name(timer: Any) -> str:
    """How the table was measured: the timer's ``describe()``, else its qualified name (not
    its ``repr``, whose address would make the same table other bytes)."""
    describe = getattr(timer, "describe", None)
    if describe is not None:
        return describe()
    return f"{getattr(timer, '__module__', '?')}.{getattr(timer, '__qualname__', type(timer).__qualname__)}"
