"""Code that runs inside a tick subprocess: the worker entry point, its hooks and tools.

It owns the tick process (`python -m workers.llm_worker`): one Strands agent under the
tick's caps, with one hook provider per concern (spend meter, tool budget, tool trace,
context governor), the candidate walk along the tick's route, the recorder of its events
and the `rag_lookup` tool. Nothing is re-exported: every module but the entry point
imports the Strands SDK, which only a tick process should pay for, and the runner starts
the worker by module name, not by import.
"""

__all__: list[str] = []
