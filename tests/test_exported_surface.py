"""Each package front exports exactly its public names, and stays light to import."""

from __future__ import annotations
import __future__

import importlib
import subprocess
import sys
import types

import pytest

FRONTS = [
    "harness.api",
    "harness.config",
    "harness.contracts",
    "harness.devtools",
    "harness.digests",
    "harness.execution",
    "harness.execution.executors",
    "harness.execution.launchers",
    "harness.folds",
    "harness.governor",
    "harness.projections",
    "harness.routing",
    "harness.scheduling",
    "harness.store",
    "workers",
]

HEAVY = ("strands", "fastapi", "uvicorn", "aiohttp", "apprise")
"""Libraries a light command must not pay for: their names live in their own modules."""


def public_names(front: types.ModuleType) -> set[str]:
    """Names the front defines or imports, less its submodules and `from __future__`."""
    return {
        name
        for name, value in vars(front).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType | __future__._Feature)
    }


def loaded_on_use(front: types.ModuleType) -> set[str]:
    """Exported names a front serves from its module `__getattr__` (PEP 562) on first use."""
    lazy = vars(front).get("__getattr__")
    return {n for n in front.__all__ if n not in vars(front) and lazy is not None}


@pytest.mark.parametrize("name", FRONTS)
def test_all_lists_exactly_the_public_names_of_the_front(name: str) -> None:
    front = importlib.import_module(name)
    exported = front.__all__
    assert len(exported) == len(set(exported))
    assert set(exported) == public_names(front) | loaded_on_use(front)


@pytest.mark.parametrize("name", FRONTS)
def test_every_exported_name_resolves(name: str) -> None:
    front = importlib.import_module(name)
    assert [n for n in front.__all__ if getattr(front, n, None) is None] == []


@pytest.mark.parametrize("name", FRONTS)
def test_every_front_says_what_it_owns(name: str) -> None:
    assert (importlib.import_module(name).__doc__ or "").strip()


def test_importing_every_front_loads_no_heavy_library() -> None:
    script = (
        "import importlib, sys\n"
        f"for name in {FRONTS!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(' '.join(sorted(h for h in {HEAVY!r} if h in sys.modules)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded == []


def test_a_stray_import_in_a_front_is_caught() -> None:
    front = types.ModuleType("front")
    front.__dict__.update(annotations=__future__.annotations, Exported=int, helper=len)
    front.__dict__["__all__"] = ["Exported"]
    assert public_names(front) - set(front.__all__) == {"helper"}
