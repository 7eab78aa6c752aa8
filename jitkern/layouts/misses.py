"""Why a launch missed: the argument whose layout no warmed binary has, in words."""

from __future__ import annotations

from typing import Any, Iterable

from jitkern.layouts.binary_key import key_fields
from jitkern.layouts.domains import ArgumentOrigins
from jitkern.layouts.specialisation import LARGE, layout_text


def explain_miss(launched: dict[str, str], warmed: list[dict[str, str]], origins: ArgumentOrigins) -> str:
    """Why a launch's specialisation (argument -> text) is none of the ``warmed`` ones:
    each argument whose specialisation no warmed binary has, e.g. ``z: not 16-byte
    aligned; warmed binaries all assume 16-byte aligned``."""
    reasons = []
    for name, text in launched.items():
        seen = list(dict.fromkeys(binary[name] for binary in warmed if name in binary))
        if seen and text not in seen:
            warmed_words = f"all assume {_words(seen[0])}" if len(seen) == 1 else \
                f"cover {' / '.join(_words(other) for other in seen)}"
            reasons.append(f"{origins.describe(name)}: {_words(text)}; warmed binaries {warmed_words}")
    if reasons:
        return "; ".join(reasons)
    if launched in warmed:
        return ("its binary was warmed, but not where Triton looked it up: on another device than the one it was "
                "loaded on, or with other constants (a setting constants(key) reads changed since)")
    differing = layout_text({name: text for name, text in launched.items()
                             if any(binary.get(name) != text for binary in warmed)})
    return f"each argument's layout was warmed, but not together: {differing}"


def _words(text: str) -> str:
    if text.startswith("*"):
        kind = text[1:].removesuffix(LARGE).removesuffix("/16")
        storage = ", its storage over 2 GiB" if text.endswith(LARGE) else ""
        return f"a {kind} tensor {'16-byte aligned' if '/16' in text else 'not 16-byte aligned'}{storage}"
    if text == "1":
        return "equal to 1"
    kind, _, divisible = text.partition("/")
    if kind in ("i32", "i64", "u64"):
        return f"{kind} {'a multiple of 16' if divisible else 'not a multiple of 16 (or not specialised)'}"
    return text


def explain_unwarmed_key(key: Any, warmed_keys: Iterable[Any]) -> str:
    """Why no binary of compile key ``key`` was warmed, in the fields that tell it from
    the nearest of ``warmed_keys`` (the fewest differ), so the manifest's config to
    change is named, not left to compare key by key."""
    fields = key_fields(key)
    others = [key_fields(other) for other in warmed_keys]
    if not others:
        return "its compile key was not warmed (no key of this kernel was)"
    differing = lambda other: [name for name in fields if other.get(name) != fields[name]]  # noqa: E731
    nearest = min(others, key=lambda other: len(differing(other)))
    parts = ", ".join(f"{name} {fields[name]!r} (warmed: {nearest.get(name)!r})" for name in differing(nearest))
    return f"its compile key was not warmed; the nearest warmed key differs in {parts}"
