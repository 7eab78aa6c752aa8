"""A deployment: the manifests of one run, their keys, and the targets each is compiled for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jitkern import settings
from jitkern.kernel import registry
from jitkern.manifest.load import LoadedManifest, load_manifest
from jitkern.targets import local_target, parse_target, parse_targets, target_name, target_of


@dataclass(frozen=True)
class Deployment:
    """What a run covers: the manifests, their (kernel, key) pairs, and for each target
    the pairs compiled for it."""

    manifests: list[LoadedManifest]
    entries: list[tuple[str, Any]]
    by_target: dict[str, list[tuple[str, Any]]]
    modules: list[str]

    @property
    def targets(self) -> list[str]:
        return list(self.by_target)

    @property
    def name(self) -> str:
        """``manifest+manifest@target+target``: names its lock in Redis."""
        return "+".join(loaded.manifest.name for loaded in self.manifests) + "@" + "+".join(self.targets)


def resolve(manifest_paths: list[str], target: str | None) -> tuple[Deployment, str]:
    """Load every manifest (all errors before any work) and choose the targets.

    ``target``: a comma-separated list (``cuda:80,cuda:90,hip:gfx942``) for which every
    key of every manifest is compiled. Without it, this machine's GPU; with no GPU here,
    each manifest's keys for that manifest's own ``targets``.
    """
    manifests = [load_manifest(path) for path in manifest_paths]
    entries_of = [list(dict.fromkeys((entry.kernel.name, key) for entry in loaded.entries for key in entry.keys))
                  for loaded in manifests]
    entries = list(dict.fromkeys(pair for pairs in entries_of for pair in pairs))
    modules = list(dict.fromkeys(module for loaded in manifests for module in loaded.manifest.modules))
    if target is not None:
        targets = parse_targets(target)
        by_target = {name: entries for name in targets}
        note = f"compiling for {', '.join(targets)} (no GPU needed)"
    elif (here := local_target()) is not None:
        # Compiled through the same compile-only driver as a named target: the cache
        # entries are those this GPU looks up, and workers can fork without GPU state.
        by_target = {target_name(here): entries}
        note = f"compiling for this machine's GPU ({target_name(here)})"
    else:
        by_target = {}
        for loaded, pairs in zip(manifests, entries_of):
            for name in loaded.manifest.targets:
                name = target_name(parse_target(name))
                by_target[name] = list(dict.fromkeys(by_target.get(name, []) + pairs))
        note = f"no GPU here: compiling each manifest for its targets ({', '.join(by_target)}), no GPU needed"
    by_target = {name: _launched_on(pairs, name) for name, pairs in by_target.items()}
    return Deployment(manifests, entries, by_target, modules), note


def _launched_on(pairs: list[tuple[str, Any]], name: str) -> list[tuple[str, Any]]:
    """The (kernel, binary key) pairs serving on the target ``name`` launches (``launched_on``)."""
    target = target_of(parse_target(name), settings.current().portable_paths)
    return [(kernel, key) for kernel, key in pairs if registry.get_kernel(kernel).launched_on(key.key, target)]
