"""Package fronts that import a submodule when one of its names is first asked for.

Python runs a package's front before any of its submodules: a front that imports every
submodule makes `from harness.contracts.secrets import redact` pay for every payload and
result model, and `harness.scheduling.status` for the whole service. A front names each
of its submodules' things once, in its `if typing.TYPE_CHECKING:` block (which is what
type checkers and editors read), and ends with `__getattr__, __all__ =
fronts.declared(__name__)`: the names it serves on first use (PEP 562) and the names it
exports both follow from that block, with whatever the front imports or defines eagerly.
"""

from __future__ import annotations
import __future__

import ast
import importlib
import re
import sys
import textwrap
import types
from collections.abc import Callable, Mapping

_TYPE_CHECKING = re.compile(r"if (typing\.)?TYPE_CHECKING:\s*$")


def names_on_first_use(
    package: str, homes: Mapping[str, tuple[str, ...]]
) -> Callable[[str], object]:
    """The `__getattr__` of `package`'s front: `homes` maps a submodule to its names."""
    home_of = {name: module for module, names in homes.items() for name in names}

    def __getattr__(name: str) -> object:
        if name in home_of:
            return getattr(importlib.import_module(f"{package}.{home_of[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def declared_homes(package: str, source: str) -> dict[str, tuple[str, ...]]:
    """Submodule (relative to `package`) -> the names the front's TYPE_CHECKING block takes.

    Only that block is parsed (a few dozen lines), so a front pays microseconds for it.
    Every statement there must import from one of the package's own submodules: the
    block is the front's list of lazily served names, nothing else.
    """
    lines = source.splitlines()
    start = next((n for n, line in enumerate(lines) if _TYPE_CHECKING.match(line)), None)
    if start is None:
        raise ValueError(f"the front of {package} has no `if typing.TYPE_CHECKING:` block")
    block = []
    for line in lines[start + 1 :]:
        if line.strip() and not line[0].isspace():
            break
        block.append(line)
    homes: dict[str, tuple[str, ...]] = {}
    for node in ast.parse(textwrap.dedent("\n".join(block))).body:
        if (
            not isinstance(node, ast.ImportFrom)
            or node.level
            or not (node.module or "").startswith(package + ".")
        ):
            raise ValueError(
                f"the front of {package}, TYPE_CHECKING block line {node.lineno}: "
                f"only `from {package}.<submodule> import …` belongs there"
            )
        home = (node.module or "")[len(package) + 1 :]
        homes[home] = homes.get(home, ()) + tuple(alias.name for alias in node.names)
    return homes


def public_names(namespace: Mapping[str, object]) -> list[str]:
    """The names a module imports or defines for others: no module, no `_name`, no feature."""
    return [
        name
        for name, value in namespace.items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType | __future__._Feature)
    ]


def declared(package: str) -> tuple[Callable[[str], object], list[str]]:
    """`package`'s `__getattr__` and `__all__`, from its TYPE_CHECKING block and namespace.

    Called as the front's last statement, when everything it defines eagerly is there.
    """
    front = sys.modules[package]
    with open(front.__file__ or "", encoding="utf-8") as file:
        homes = declared_homes(package, file.read())
    lazy = [name for names in homes.values() for name in names]
    return names_on_first_use(package, homes), sorted({*public_names(vars(front)), *lazy})
