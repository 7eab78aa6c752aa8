"""Warmup manifests: which kernels, with which configs and layout domains, a deployment needs.

- ``schema``: the JSON format (pydantic models), ``ManifestError``.
- ``load``: ``load_manifest``, a manifest validated and its keys enumerated.
- ``domains``: its layout domains checked against the kernels they name.
- ``deployment``: ``resolve``, the manifests of a run and the targets each is compiled for.
- ``record``: ``merge_record``, what the guard recorded while serving added to a manifest.
"""

from jitkern.manifest.deployment import Deployment, resolve
from jitkern.manifest.load import LoadedManifest, ResolvedEntry, load_manifest, manifest_keys
from jitkern.manifest.record import merge_record, recorded_entries
from jitkern.manifest.schema import ManifestError, json_schema

__all__ = ["Deployment", "LoadedManifest", "ManifestError", "ResolvedEntry", "json_schema", "load_manifest",
           "manifest_keys", "merge_record", "recorded_entries", "resolve"]
