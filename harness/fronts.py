"""Package fronts that import a submodule when one of its names is first asked for.

Python runs a package's front before any of its submodules: a front that imports every
submodule makes `from harness.contracts.secrets import redact` pay for every payload and
result model, and `harness.scheduling.status` for the whole service. A front that names
its submodules' things through `names_on_first_use` (PEP 562) keeps `from package import
Name` working and costs only what is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


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
