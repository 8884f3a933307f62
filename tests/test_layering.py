"""The packages follow the data path: no part imports a later one (`harness.LAYERS`).

A part imports another through its front only (`from harness.contracts import
BudgetSpent`), never from its submodules, which stay free to move inside their part.

Event types are named through their classes outside `harness.contracts`, so a renamed or
retyped event cannot leave a filter behind that silently matches nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness import LAYERS
from harness.contracts import EVENT_TYPES

ROOT = Path(__file__).parents[1]


def layer_of(module: str) -> int | None:
    """The index in LAYERS of the part a dotted module name belongs to (None: not ours)."""
    for index, part in enumerate(LAYERS):
        if module == part or module.startswith(part + "."):
            return index
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(
    source: str, module: str, is_package: bool, names: bool = True
) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in the source, wherever it stands.

    A `from … import` gives each name it takes as `module.name` (a name may be a
    submodule), or with `names=False` the module it reads, once.
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")
                package = package if is_package else package[:-1]
                base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
            if not names:
                yield node.lineno, base
                continue
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Imports of `module`'s source that reach a part after its own."""
    own = layer_of(module)
    assert own is not None, f"{module} belongs to no part of harness.LAYERS"
    found = []
    for line, target in imported(source, module, is_package):
        layer = layer_of(target)
        if layer is not None and layer > own:
            found.append(
                f"{module}:{line} imports {target} ({LAYERS[layer]} comes after {LAYERS[own]})"
            )
    return found


def sources() -> list[Path]:
    return sorted(
        path
        for folder in ("harness", "workers")
        for path in (ROOT / folder).rglob("*.py")
        if path != ROOT / "harness" / "__init__.py"
    )


def in_every_source(check: Callable[[str, str, bool], list[str]]) -> list[str]:
    """What `check` finds in any module of tickwork, given its source, name and package-ness."""
    return [
        problem
        for path in sources()
        for problem in check(
            path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py"
        )
    ]


def test_no_part_of_tickwork_imports_a_later_one() -> None:
    assert in_every_source(violations) == []


def test_every_module_belongs_to_a_layer() -> None:
    assert [module_name(p) for p in sources() if layer_of(module_name(p)) is None] == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("harness.contracts.payload", "from harness.governor.policy import GovernorLimits"),
        ("harness.scheduling.service", "def f():\n    from harness.execution import runner"),
        ("harness.projections.calibration", "import harness.governor.calibration"),
        ("harness.store.sql", "from ..projections import ticks"),
    ],
)
def test_an_import_of_a_later_part_is_caught(module: str, source: str) -> None:
    assert violations(source, module)


def test_imports_of_earlier_parts_and_of_other_libraries_pass() -> None:
    source = "import sqlalchemy\nfrom harness.store import EventStore\nfrom . import base\n"
    assert violations(source, "harness.projections.ticks") == []


def past_fronts(source: str, module: str, is_package: bool = False) -> list[str]:
    """Imports of `module`'s source that reach into another part's submodules.

    A part's submodules are its own business: another part names what it needs through
    the part's front (`from harness.contracts import BudgetSpent`), which serves it on
    first use (`harness.fronts`), so a submodule can move, split or be renamed inside its
    part without an edit anywhere else.
    """
    own = layer_of(module)
    found = []
    for line, target in sorted(imported(source, module, is_package, names=False)):
        layer = layer_of(target)
        if layer is not None and layer != own and target != LAYERS[layer]:
            found.append(f"{module}:{line} imports {target}: import from {LAYERS[layer]}")
    return found


def test_imports_across_parts_go_through_the_fronts() -> None:
    assert in_every_source(past_fronts) == []


def test_an_import_past_a_front_is_caught_and_one_inside_a_part_is_not() -> None:
    source = (
        "from harness.contracts import BudgetSpent\n"
        "from harness.contracts.events import TickLost\n"
        "def f():\n"
        "    import harness.store.sql\n"
        "    from harness.execution.launchers import ColdLauncher\n"
        "    from harness.scheduling.waves import claim_wave\n"
        "    from .panels import Panel\n"
        "    from . import queue\n"
    )
    assert past_fronts(source, "harness.execution.runner") == [
        "harness.execution.runner:2 imports harness.contracts.events: import from "
        "harness.contracts",
        "harness.execution.runner:4 imports harness.store.sql: import from harness.store",
        "harness.execution.runner:6 imports harness.scheduling.waves: import from "
        "harness.scheduling",
    ]
    assert past_fronts("from ..store.sql import upsert\n", "harness.projections.ticks") == [
        "harness.projections.ticks:1 imports harness.store.sql: import from harness.store"
    ]


EVENT_TYPE_NAMES = frozenset(name for name, _version in EVENT_TYPES)


def docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes: prose may name an event type."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def bare_event_types(source: str, module: str) -> list[str]:
    """Event type names written as string literals in `module`'s source, docstrings aside."""
    tree = ast.parse(source)
    prose = docstrings(tree)
    named = sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in EVENT_TYPE_NAMES
        and id(node) not in prose
    )
    return [f"{module}:{line} names {name!r}: use {name}.type" for line, name in named]


def test_event_types_are_named_through_their_classes_outside_contracts() -> None:
    found = [
        problem
        for path in sources()
        if not module_name(path).startswith("harness.contracts")
        for problem in bare_event_types(path.read_text(encoding="utf-8"), module_name(path))
    ]
    assert found == []


def test_a_bare_event_type_is_caught_and_a_docstring_naming_one_is_not() -> None:
    source = (
        '"""Counts ModelCalled."""\n'
        "def f(e):\n"
        '    """ModelCalled"""\n'
        '    return e.type == "ModelCalled" or e.type in (TickLost.type,)\n'
        'TYPES = frozenset({"BudgetSpent", "not an event"})\n'
    )
    assert bare_event_types(source, "harness.x") == [
        "harness.x:4 names 'ModelCalled': use ModelCalled.type",
        "harness.x:5 names 'BudgetSpent': use BudgetSpent.type",
    ]


SQL_OWNERS = ("harness.store", "harness.projections")
"""The parts that hold SQL: the log and tracking (store), the read models (projections)."""
SQL_EXCEPTIONS = {
    "harness.config.settings": "the store URL is checked with SQLAlchemy's `make_url` (no "
    "connection): every command then opens the store with SQLAlchemy anyway, so a parse of "
    "its own would not make start-up cheaper (RESULTS.md, `tickwork status` start-up)",
}
"""Modules outside the owners allowed to import SQLAlchemy, each with why."""


SQL_CALLS = ("read_transaction", "exec_driver_sql")
"""Calls that reach a SQLAlchemy connection: the read models' handle, and raw SQL on one."""


def sql_access(source: str, module: str, is_package: bool = False) -> list[str]:
    """Where `module`'s source imports SQLAlchemy or makes one of the `SQL_CALLS`."""
    found = [
        f"{module}:{line} imports {target}"
        for line, target in imported(source, module, is_package)
        if target == "sqlalchemy" or target.startswith("sqlalchemy.")
    ]
    found += [
        f"{module}:{node.lineno} calls {node.func.attr}: ask a read model in harness.projections"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SQL_CALLS
    ]
    return found


def test_nothing_outside_store_and_projections_touches_sql() -> None:
    found = [
        problem
        for path in sources()
        if layer_of(module_name(path)) not in {LAYERS.index(owner) for owner in SQL_OWNERS}
        and module_name(path) not in SQL_EXCEPTIONS
        for problem in sql_access(
            path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py"
        )
    ]
    assert found == []


def test_an_sql_import_read_transaction_or_raw_sql_is_caught() -> None:
    source = (
        "import sqlalchemy as sa\n"
        "def f(store):\n"
        "    from sqlalchemy.engine import make_url\n"
        "    with store.read_transaction() as conn:\n"
        "        return conn.exec_driver_sql('SELECT 1')\n"
        "store.read_stream('tick-1')\n"
    )
    assert sql_access(source, "harness.api.reads") == [
        "harness.api.reads:1 imports sqlalchemy",
        "harness.api.reads:3 imports sqlalchemy.engine.make_url",
        "harness.api.reads:4 calls read_transaction: ask a read model in harness.projections",
        "harness.api.reads:5 calls exec_driver_sql: ask a read model in harness.projections",
    ]


def migration_arrows(source: str, module: str, is_package: bool = False) -> list[str]:
    """Imports that tie the application and its migrations together, either way.

    A migration keeps its own copy of what it needs (`migrations.packing`), so that it
    means forever what it meant when it was written; the store reaches the migrations
    through Alembic's `script_location` alone.
    """
    ours = module == "migrations" or module.startswith("migrations.")
    found = []
    for line, target in imported(source, module, is_package, names=False):
        other = target.split(".")[0]
        if (ours and other in {"harness", "workers"}) or (not ours and other == "migrations"):
            found.append(f"{module}:{line} imports {target}")
    return found


def test_the_application_and_its_migrations_import_nothing_of_each_other() -> None:
    migration_sources = sorted((ROOT / "migrations").rglob("*.py"))
    found = in_every_source(migration_arrows) + [
        problem
        for path in migration_sources
        for problem in migration_arrows(
            path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py"
        )
    ]
    assert found == []


def test_an_arrow_between_the_application_and_its_migrations_is_caught() -> None:
    assert migration_arrows("from harness.store.tick_rows import unpack", "migrations.x")
    assert migration_arrows("import migrations", "harness.store.migrate")
    assert migration_arrows("import sqlalchemy", "migrations.x") == []
