"""A fold worker: `python -m harness.folds.worker BACKEND`, one range folded, sums on stdout.

It imports the backend's driver first, while its job is being prepared. The job (a
kernel and a range query, pickled) then arrives on stdin, the password of a PostgreSQL
store with it, so no secret is ever in its argv; its result (the sums and the number of
events folded, or the exception that stopped it) leaves pickled on stdout. It imports
only `harness.folds` and the driver: it is ready about 0.1 s after it is spawned (0.3 s
with psycopg).
"""

from __future__ import annotations

import gc
import pickle
import sys

from harness.folds.ranges import RangeQuery, counted, load_driver
from harness.folds.sums import Kernel


def main() -> int:
    """Fold the job read from stdin; 0 when the sums were written, 1 when an error was."""
    # The cycle collector would scan the growing sums again and again for garbage that
    # reference counting frees anyway; the process ends with the fold.
    gc.disable()
    if len(sys.argv) > 1:
        load_driver(sys.argv[1])
    kernel: Kernel
    query: RangeQuery
    kernel, query = pickle.load(sys.stdin.buffer)
    try:
        events, counter = counted(query.data())
        result: object = (kernel(events), next(counter))
        code = 0
    except Exception as exc:
        result, code = exc, 1
    try:
        payload = pickle.dumps(result, pickle.HIGHEST_PROTOCOL)
    except Exception:
        # Some driver errors hold what pickle cannot take; their text is what matters.
        payload = pickle.dumps(RuntimeError(f"{type(result).__name__}: {result}"))
    sys.stdout.buffer.write(payload)
    sys.stdout.buffer.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
