"""`Patches.when_imported`: a library is hooked when the process imports it, never imported for the hook."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from streamscope.adapters.stainless.patches import Patches
from streamscope.core import guard


@pytest.fixture
def probe(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The name of a module on the path that nothing has imported yet."""
    name = f"streamscope_probe_{request.node.name.replace('[', '_').replace(']', '_')}"
    (tmp_path / f"{name}.py").write_text("class Client:\n    def send(self):\n        return 'sent'\n")
    sys.path.insert(0, str(tmp_path))
    try:
        yield name
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_applied_at_import_not_before(probe: str) -> None:
    patches, seen = Patches(), []
    patches.when_imported(probe, seen.append)
    assert probe not in sys.modules and seen == []
    module = importlib.import_module(probe)
    assert seen == [module]


def test_applied_at_once_when_already_imported(probe: str) -> None:
    module = importlib.import_module(probe)
    patches, seen = Patches(), []
    patches.when_imported(probe, seen.append)
    assert seen == [module]


def test_undone_before_the_import_applies_nothing(probe: str) -> None:
    patches, seen = Patches(), []
    patches.when_imported(probe, seen.append)
    patches.undo()
    importlib.import_module(probe)
    assert seen == []


def test_a_late_failure_never_reaches_the_import(probe: str) -> None:
    """The hook wraps a method that is not there: the import succeeds, the error is counted."""
    patches = Patches()

    def apply(module: ModuleType) -> None:
        patches.wrap(module.Client, "missing", lambda wrapped, instance, args, kwargs: None)

    before = guard.count
    patches.when_imported(probe, apply)
    module = importlib.import_module(probe)
    assert module.Client().send() == "sent"
    assert guard.count == before + 1


def test_a_wrap_made_late_is_undone(probe: str) -> None:
    patches = Patches()
    patches.when_imported(probe, lambda m: patches.wrap(m.Client, "send", lambda w, i, a, k: "ours"))
    module = importlib.import_module(probe)
    assert module.Client().send() == "ours"
    patches.undo()
    assert module.Client().send() == "sent"


def test_a_hook_undone_before_its_import_holds_nothing(probe: str) -> None:
    """The import system keeps a waiting hook for good: once undone it must not keep what it would
    have called alive (an uninstrumented adapter, its pipeline, a breaker store and its thread)."""
    import gc
    import weakref

    class Adapter:
        def apply(self, module: ModuleType) -> None:
            raise AssertionError("applied after undo")

    adapter = Adapter()
    gone = weakref.ref(adapter)
    patches = Patches()
    patches.when_imported(probe, adapter.apply)
    patches.undo()
    del adapter, patches
    gc.collect()
    assert gone() is None
    importlib.import_module(probe)  # the waiting hook runs, and applies nothing
