"""The line every benchmark prints first, so a figure is never read without its machine."""

from __future__ import annotations

import os
import platform


def describe() -> str:
    return (
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {platform.platform()}"
    )
