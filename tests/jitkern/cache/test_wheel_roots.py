"""Installed cache wheels are found once per set of installed distributions, not per process."""

from __future__ import annotations

import importlib.metadata
import json
import sys

import pytest

from jitkern import settings
from jitkern.cache import roots


def install_cache_package(site, name: str) -> str:
    """A distribution in ``site`` as a cache wheel installs it: its package with a ``cache``
    folder, and an entry point in ``jitkern.caches`` naming the package."""
    (site / name / roots.WHEEL_DATA).mkdir(parents=True)
    (site / name / "__init__.py").write_text("")
    info = site / f"{name}-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0.0\n")
    (info / "entry_points.txt").write_text(f"[{roots.WHEEL_ENTRY_POINTS}]\n{name} = {name}\n")
    return str(site / name / roots.WHEEL_DATA)


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fresh folder on ``sys.path``, a fresh state folder, and ``wheel_roots`` asked anew."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    roots.wheel_roots.cache_clear()
    with settings.scope(state_dir=str(tmp_path / "state")):
        yield folder
    roots.wheel_roots.cache_clear()


def roots_in(site) -> tuple[str, ...]:
    roots.wheel_roots.cache_clear()
    return tuple(root for root in roots.wheel_roots() if root.startswith(str(site)))


def entry_points_refused(monkeypatch):
    def refuse(**_):
        raise AssertionError("entry points read although nothing installed changed")

    monkeypatch.setattr(importlib.metadata, "entry_points", refuse)


def test_a_process_reads_the_entry_points_only_when_the_installed_distributions_changed(site, monkeypatch):
    first = install_cache_package(site, "jitkern_cache_first")
    assert roots_in(site) == (first,)
    memo = json.loads((site.parent / "state" / roots.WHEEL_ROOTS_MEMO).read_text())
    assert memo == {roots.installed_distributions(): json.dumps([first])}

    with monkeypatch.context() as patch:  # the next process: the memo answers
        entry_points_refused(patch)
        assert roots_in(site) == (first,)

    second = install_cache_package(site, "jitkern_cache_second")  # another wheel installed: read again
    assert roots_in(site) == (first, second)

    entry_points = site / "jitkern_cache_first-1.0.0.dist-info" / "entry_points.txt"
    entry_points.write_text("[console_scripts]\nfirst = jitkern_cache_first:main\n")  # rewritten in place
    assert roots_in(site) == (second,)

    (site / "jitkern_cache_second" / roots.WHEEL_DATA).rename(site / "elsewhere")  # removed by hand
    with monkeypatch.context() as patch:
        entry_points_refused(patch)
        with pytest.raises(AssertionError, match="entry points read"):  # the memo's answer is checked
            roots_in(site)
    assert roots_in(site) == ()


def test_another_finder_of_distributions_is_asked_every_time(site, monkeypatch):
    class Finder:
        @staticmethod
        def find_distributions(context=None):
            return iter(())

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder])
    assert roots.installed_distributions() is None
    first = install_cache_package(site, "jitkern_cache_first")
    assert roots_in(site) == (first,)
    with monkeypatch.context() as patch:
        entry_points_refused(patch)
        with pytest.raises(AssertionError, match="entry points read"):
            roots_in(site)
