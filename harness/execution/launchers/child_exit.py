"""How a forked child ends: with the status Python would have given it, and nothing twice.

Shared by the fork server's ticks and by anything else that forks a warm process to run
one body (the test suite's one-shot commands). Kept apart from the fork server's module,
which runs as `python -m`: a package front importing that module would load it twice.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

EXIT_CRASHED = 1
"""Exit code of a child whose worker raised, as Python's for an uncaught exception."""


def end_as_python_would(body: Callable[[], int]) -> NoReturn:
    """Run a forked child's `body`, then end the child with the status Python would give.

    A `SystemExit` ends it with its code (None is 0, a message is printed and is 1), any
    other exception with its traceback on stderr and `EXIT_CRASHED`. The end is
    `os._exit`, so nothing the child inherited (atexit hooks, the parent's buffered
    files) runs or flushes twice; the child's own standard streams are flushed first.
    """
    code = EXIT_CRASHED
    try:
        code = body()
    except SystemExit as exc:  # as Python ends on one: None is 0, a message is printed
        if isinstance(exc.code, int) or exc.code is None:
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
