"""Each package front exports exactly its public names, and stays light to import."""

from __future__ import annotations
import __future__

import importlib
import subprocess
import sys
import types

import pytest

from harness.fronts import declared_homes

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


def test_a_fronts_names_are_declared_once_in_its_type_checking_block() -> None:
    source = (
        '"""A front."""\n'
        "import typing\n"
        "if typing.TYPE_CHECKING:\n"
        "    from pkg.a import One, Two\n"
        "    from pkg.b.c import (\n"
        "        Three,\n"
        "    )\n"
        "    from pkg.a import Four\n"
        "\n"
        "__getattr__, __all__ = fronts.declared(__name__)\n"
    )
    assert declared_homes("pkg", source) == {"a": ("One", "Two", "Four"), "b.c": ("Three",)}


@pytest.mark.parametrize(
    "line", ["from other.a import One", "import pkg.a", "from .a import One", "x = 1"]
)
def test_a_type_checking_block_that_is_not_a_list_of_submodule_names_is_refused(
    line: str,
) -> None:
    source = f"import typing\nif typing.TYPE_CHECKING:\n    from pkg.a import One\n    {line}\n"
    with pytest.raises(ValueError, match=r"front of pkg, TYPE_CHECKING block line 2"):
        declared_homes("pkg", source)
