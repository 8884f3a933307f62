"""Code that runs inside a tick subprocess: the worker entry point, its hooks and tools."""
