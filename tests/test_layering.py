"""The packages follow the data path: no part imports a later one (`harness.LAYERS`).

A part imports another through its front only (`from harness.contracts import
BudgetSpent`), never from its submodules, which stay free to move inside their part.

Event types are named through their classes outside `harness.contracts`, so a renamed or
retyped event cannot leave a filter behind that silently matches nothing.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness import LAYERS
from harness.contracts import EVENT_TYPES

ROOT = Path(__file__).parents[1]


@functools.cache
def parsed(source: str) -> ast.Module:
    """Each module's tree, parsed once for every check of this file (half a second a pass)."""
    return ast.parse(source)


@functools.cache
def nodes(source: str) -> tuple[ast.AST, ...]:
    """Every node of the source's tree, walked once."""
    return tuple(ast.walk(parsed(source)))


@pytest.fixture(scope="module", autouse=True)
def _trees_leave_with_the_module() -> Iterator[None]:
    """The worker that ran these checks does not keep every tree of tickwork for the rest."""
    yield
    parsed.cache_clear()
    nodes.cache_clear()


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
    for node in nodes(source):
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
    tree = parsed(source)
    prose = docstrings(tree)
    named = sorted(
        (node.lineno, node.value)
        for node in nodes(source)
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
"""The parts that hold SQL and connections: the log and tracking (store), the read models
(projections, which take the store's transactions for their own queries)."""
SQL_EXCEPTIONS = {
    "harness.folds.ranges": "a fold worker's range, read on a DB-API connection of its own "
    "(`Database.connect`) to the store's database as the store described it "
    "(`worker_database`), running the SQL the store wrote (`harness.store.sql`): the worker "
    "imports only `harness.folds`; importing the store's front costs 429 modules with "
    "SQLAlchemy and pydantic, 0.36 s of CPU, against 107 and 0.02 s",
    "harness.rag": "the retrieval index is a SQLite file of its own, built and read with "
    "`sqlite3`: not the event store",
}
"""Modules (or packages) outside the owners allowed SQL, each with why."""

SQL_CALLS = ("read_transaction", "write_transaction", "driver_transaction", "exec_driver_sql")
"""Calls that hand out a connection of the store (SQLAlchemy's, or the driver's under it),
or run raw SQL on one."""
DRIVERS = frozenset({"sqlite3", "psycopg", "psycopg2", "asyncpg", "aiosqlite"})
"""DB-API drivers: a connection of one (`sqlite3.connect`) bypasses the store altogether."""


def driver_connect(node: ast.Call) -> str | None:
    """The dotted name of a driver's `connect` this call makes (`psycopg.connect`), if any."""
    parts = []
    func: ast.expr = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or not parts or parts[0] != "connect":
        return None
    return ".".join([func.id, *reversed(parts)]) if func.id in DRIVERS else None


def sql_access(source: str, module: str, is_package: bool = False) -> list[str]:
    """Where `module`'s source imports SQLAlchemy or a driver's `connect`, or takes a connection."""
    found = [
        f"{module}:{line} imports {target}"
        for line, target in imported(source, module, is_package)
        if target.split(".")[0] == "sqlalchemy"
        or (target.split(".")[0] in DRIVERS and target.endswith(".connect"))
    ]
    for node in nodes(source):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in SQL_CALLS:
            found.append(
                f"{module}:{node.lineno} calls {node.func.attr}: ask a named operation of "
                "the store or a read model in harness.projections"
            )
        elif (connect := driver_connect(node)) is not None:
            found.append(f"{module}:{node.lineno} calls {connect}: the store owns the database")
    return sorted(found, key=lambda problem: int(problem.split(":")[1].split()[0]))


def excepted(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in SQL_EXCEPTIONS)


def outside_the_owners(source: str, module: str, is_package: bool = False) -> list[str]:
    """`sql_access`'s findings in a module of neither an owner of SQL nor an exception."""
    if layer_of(module) in {LAYERS.index(owner) for owner in SQL_OWNERS} or excepted(module):
        return []
    return sql_access(source, module, is_package)


def test_nothing_outside_store_and_projections_takes_a_connection_or_touches_sql() -> None:
    assert in_every_source(outside_the_owners) == []


def test_a_connection_the_executor_takes_is_caught_and_one_the_store_takes_is_not() -> None:
    """The executor asks the store by name for its jobs: a connection it takes is caught."""
    source = (
        "def defer(store, jobs):\n"
        "    with store.driver_transaction() as conn:\n"
        "        return conn.execute('SELECT 1')\n"
    )
    assert outside_the_owners(source, "harness.execution.executors.procrastinate.jobs") == [
        "harness.execution.executors.procrastinate.jobs:2 calls driver_transaction: ask a "
        "named operation of the store or a read model in harness.projections"
    ]
    assert outside_the_owners(source, "harness.store.procrastinate_jobs") == []
    assert outside_the_owners(source, "harness.projections.ticks") == []
    assert outside_the_owners("import sqlite3\nsqlite3.connect('rag.db')\n", "harness.rag") == []


def test_every_sql_exception_names_a_module_that_still_needs_it() -> None:
    """An exception outliving its reason would let the next connection through unseen."""
    modules = {module_name(path): path for path in sources()}
    for name in SQL_EXCEPTIONS:
        needing = [
            problem
            for module, path in modules.items()
            if module == name or module.startswith(name + ".")
            for problem in sql_access(
                path.read_text(encoding="utf-8"), module, path.name == "__init__.py"
            )
        ]
        assert needing, f"{name} is excepted and takes no connection any more: drop it"


def test_a_connection_taken_outside_the_store_or_sql_written_there_is_caught() -> None:
    source = (
        "import sqlalchemy as sa\n"
        "import sqlite3\n"
        "from psycopg import connect\n"
        "def f(store):\n"
        "    from sqlalchemy.engine import make_url\n"
        "    with store.read_transaction() as conn:\n"
        "        return conn.exec_driver_sql('SELECT 1')\n"
        "def g(self, path):\n"
        "    with self.store.write_transaction() as conn, self.store.driver_transaction() as raw:\n"
        "        pass\n"
        "    sqlite3.connect(path)\n"
        "    return psycopg.Connection.connect('dbname=x')\n"
        "store.read_stream('tick-1')\n"
        "sock.connect(('127.0.0.1', 80))\n"
    )
    ask = "ask a named operation of the store or a read model in harness.projections"
    assert sql_access(source, "harness.scheduling.archiving") == [
        "harness.scheduling.archiving:1 imports sqlalchemy",
        "harness.scheduling.archiving:3 imports psycopg.connect",
        "harness.scheduling.archiving:5 imports sqlalchemy.engine.make_url",
        f"harness.scheduling.archiving:6 calls read_transaction: {ask}",
        f"harness.scheduling.archiving:7 calls exec_driver_sql: {ask}",
        f"harness.scheduling.archiving:9 calls write_transaction: {ask}",
        f"harness.scheduling.archiving:9 calls driver_transaction: {ask}",
        "harness.scheduling.archiving:11 calls sqlite3.connect: the store owns the database",
        "harness.scheduling.archiving:12 calls psycopg.Connection.connect: the store owns "
        "the database",
    ]


def test_the_exceptions_cover_their_modules_and_packages_only() -> None:
    assert excepted("harness.folds.ranges")
    assert excepted("harness.rag")
    assert not excepted("harness.execution.executors.procrastinate.jobs")
    assert not excepted("harness.ragged")
    assert not excepted("harness.folds.worker")
    assert not excepted("harness.scheduling.archiving")


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
