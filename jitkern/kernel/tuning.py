"""A kernel's tuning space: candidate configs of its ``tuned()`` key fields, the bucket that
selects among them per call, and the winners a process took from a tuning table.

A kernel declares its space once, beside its ``CompileKey``::

    tuning = TuningSpace(
        configs=[dict(block_m=16, num_warps=4), dict(block_m=64, num_warps=8)],  # each names every tuned field
        by=dict(batch=size_of("a", 0, buckets=BATCHES, warm=MAX_TOKENS)),
        default=lambda batch: ...,                                              # a candidate, for any bucket
        calls=public_function)                                                  # whose launch ``tune`` times

A call's **bucket** is its key without the tuned fields, and the ``by`` values (selectors:
read from the call like key fields, bucketed, but no part of the binary: two buckets that
pick one config launch one binary). Warmup builds every candidate of every key; ``tune``
times them per bucket on a GPU and writes a table (``jitkern.tuning``); a serving process
takes the table's winners (``Winners.take``), and a call picks its bucket's winner, else the
default, with no benchmark and no compile. ``dispatch`` is memoised, so the pick costs
nothing once a bucket has been seen.
"""

from __future__ import annotations

import bisect
import contextlib
import inspect
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping


class TuningError(ValueError):
    """A tuning space, table row or candidate that cannot be used; one line naming the kernel."""


@dataclass(frozen=True, eq=False)
class TuningSpace:
    """What a kernel may launch with and what chooses: ``configs``, the candidates (each a
    dict giving every ``tuned()`` field of the key); ``by``, the selectors (name -> a field
    declaration read from the call, ``computed``/``size_of``/``argument``/``dtype_of``, with
    the ``warm`` values a deployment tunes); ``default``, the candidate a bucket takes when
    no table names one (a config, or a function of bucket fields named by its parameters;
    None: the first candidate). What ``tune`` times a candidate on, one of:
    ``calls``, the public function whose kernel launch is timed, on random arguments of the
    bucket's sizes drawn from the kernel's ``arguments``; ``inputs(key, device, **selectors)``,
    the real ``__call__`` arguments of a bucket, written by hand."""

    configs: tuple = ()
    by: Mapping[str, Any] = field(default_factory=dict)
    default: Any = None
    calls: Callable[..., Any] | None = None
    inputs: Callable[..., dict[str, Any]] | None = None


@dataclass(frozen=True)
class Buckets:
    """Values grouped by each bucket's first value: ``Buckets((1, 2, 4, 8)).of(5)`` is 4.
    A value below the first bucket takes the first."""

    starts: tuple[int, ...]

    def of(self, value: int) -> int:
        return self.starts[max(bisect.bisect_right(self.starts, value) - 1, 0)]

    def upto(self, most: int) -> list[int]:
        """The buckets values up to ``most`` fall in (a deployment's, for ``Config(expand=)``)."""
        return [start for start in self.starts if start <= most] or [self.starts[0]]


_watchers: list[Callable[..., None]] = []
_every_winners: weakref.WeakSet = weakref.WeakSet()


def watch_defaults(watcher: Callable[..., None], on: bool = True) -> None:
    """Call ``watcher(kernel=, bucket=, config=, source=)`` when a call takes a bucket's
    default for want of a table row (the guard's warn and error modes), or no longer. Each
    call says so anew (the guard's mode may have changed: error mode refuses what warn mode
    let by): the buckets told before are forgotten, and the keys picked for them."""
    if on and watcher not in _watchers:
        _watchers.append(watcher)
    elif not on and watcher in _watchers:
        _watchers.remove(watcher)
    for winners in tuple(_every_winners):
        winners.forget_told()


def config_name(config: Mapping[str, Any]) -> str:
    """A candidate's readable, stable name: ``block_m=16,num_warps=4``."""
    return ",".join(f"{name}={value}" for name, value in config.items())


class Winners:
    """A tuned kernel's space as its declaration reads it, and the winner of each bucket this
    process took from a table. ``bucket_names``: the key's untuned fields, then the
    selectors; a bucket is the tuple of their values."""

    def __init__(self, owner: str, kernel: str, space: TuningSpace, untuned: tuple[str, ...], tuned: tuple[str, ...],
                 selector_rows: Callable[[Mapping[str, Any]], list[tuple]], forget: Callable[[], None]):
        self.owner, self.kernel, self.space, self.tuned_names = owner, kernel, space, tuned  # class, registry name
        self.bucket_names = (*untuned, *space.by)
        self.untuned_names = untuned
        if space.calls is not None and space.inputs is not None:
            raise TuningError(f"{owner}.tuning: calls= and inputs= both say what tune times; give one")
        self.candidates = tuple(self._candidate(index, config) for index, config in enumerate(space.configs))
        if not self.candidates:
            raise TuningError(f"{owner}.tuning: no configs; a tuning space names its candidates")
        names = [config_name(config) for config in self.candidates]
        if len(set(names)) < len(names):
            raise TuningError(f"{owner}.tuning: configs {sorted({n for n in names if names.count(n) > 1})} "
                              "given twice")
        if isinstance(space.default, Mapping):
            self._known(self._candidate("default", space.default), "default")
        elif callable(space.default):
            unknown = set(inspect.signature(space.default).parameters) - set(self.bucket_names)
            if unknown:
                raise TuningError(f"{owner}.tuning: default reads {sorted(unknown)}, not bucket fields "
                                  f"({', '.join(self.bucket_names)})")
        elif space.default is not None:
            raise TuningError(f"{owner}.tuning: default={space.default!r}: expected a config or a function")
        self._selector_rows = selector_rows
        self._forget = forget
        self.rows: dict[tuple, dict[str, Any]] = {}
        self.source = ""  # the table the rows came from, for messages
        self._warned: set[tuple] = set()
        _every_winners.add(self)

    def forget_told(self) -> None:
        """Tell the watchers again of each bucket that takes its default (``watch_defaults``)."""
        if self._warned:
            self._warned.clear()
            self._forget()

    def _candidate(self, where: Any, config: Any) -> dict[str, Any]:
        """``config`` with the tuned fields in key order; TuningError unless it gives exactly them."""
        at = f"{self.owner}.tuning: {'configs[' + str(where) + ']' if isinstance(where, int) else where}"
        if not isinstance(config, Mapping):
            raise TuningError(f"{at} = {config!r}: expected a dict of tuned fields ({', '.join(self.tuned_names)})")
        missing, unknown = set(self.tuned_names) - set(config), set(config) - set(self.tuned_names)
        if missing or unknown:
            raise TuningError(f"{at}: " + "; ".join(([f"lacks {sorted(missing)}"] if missing else [])
                                                    + ([f"{sorted(unknown)} are not tuned fields"] if unknown else []))
                              + f" (the tuned fields: {', '.join(self.tuned_names)})")
        return {name: config[name] for name in self.tuned_names}

    def _known(self, config: dict[str, Any], what: str) -> dict[str, Any]:
        if config not in self.candidates:
            raise TuningError(f"{self.owner}.tuning: {what} {config_name(config)} is not one of its configs, "
                              "which are all warmup builds")
        return config

    # --- per call --------------------------------------------------------------------------

    def pick(self, bucket: tuple) -> dict[str, Any]:
        """The bucket's winner, else its default, told to the watchers (the guard) once a
        bucket; a watcher raising (the guard in error mode) refuses the call."""
        config = self.rows.get(bucket)
        if config is not None:
            return config
        config = self.default(bucket)
        if bucket not in self._warned:
            for watcher in tuple(_watchers):
                watcher(kernel=self.kernel, bucket=self.describe(bucket), config=config_name(config),
                        source=self.source)
            self._warned.add(bucket)
        return config

    def chosen(self, bucket: tuple) -> dict[str, Any]:
        """What a call of ``bucket`` launches with (as ``pick``, telling no one): what ``load()`` loads."""
        return self.rows.get(bucket) or self.default(bucket)

    def default(self, bucket: tuple) -> dict[str, Any]:
        """The declared default of ``bucket`` (one of the candidates)."""
        default = self.space.default
        if default is None:
            return self.candidates[0]
        if callable(default) and not isinstance(default, Mapping):
            values = dict(zip(self.bucket_names, bucket))
            config = default(**{name: values[name] for name in inspect.signature(default).parameters})
            return self._known(self._candidate(f"default({self.describe(bucket)})", config), "default")
        return self._candidate("default", default)

    # --- tables ----------------------------------------------------------------------------

    def take(self, rows: Mapping[tuple, Mapping[str, Any]], source: str) -> None:
        """Launch each bucket of ``rows`` with its config (a candidate) from now on; the other
        buckets take the default. ``source`` names the table in messages."""
        taken = {}
        for bucket, config in rows.items():
            if len(bucket) != len(self.bucket_names):
                raise TuningError(f"{source}: bucket {bucket!r} is not ({', '.join(self.bucket_names)})")
            taken[tuple(bucket)] = self._known(self._candidate(source, config), f"{source}: the winner")
        self.rows, self.source = taken, source
        self._warned.clear()
        self._forget()  # memoised dispatch and public calls' plans hold keys picked before

    @contextlib.contextmanager
    def trying(self, bucket: tuple, config: Mapping[str, Any]) -> Iterator[None]:
        """Calls of ``bucket`` launch the candidate ``config`` inside the block (what ``tune``
        times through a public function), whatever a table says."""
        rows, source = self.rows, self.source
        self.rows = {**rows, tuple(bucket): self._known(self._candidate("trying", config), "a tried config")}
        self._forget()
        try:
            yield
        finally:
            self.rows, self.source = rows, source
            self._forget()

    def bucket_of(self, key: Any, selectors: Mapping[str, Any]) -> tuple:
        """The bucket of a compile key launched with these selector values."""
        return (*(getattr(key, name) for name in self.untuned_names), *(selectors[name] for name in self.space.by))

    def selector_rows(self, config: Mapping[str, Any]) -> list[tuple]:
        """Every combination of the selectors' values a deployment's ``config`` warms."""
        return self._selector_rows(config)

    def describe(self, bucket: tuple) -> str:
        return ",".join(f"{name}={value}" for name, value in zip(self.bucket_names, bucket))
