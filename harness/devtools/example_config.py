"""The commented `tickwork.toml` that `tickwork init` writes.

It is package data (`tickwork.example.toml` beside this module) so that an installed
tickwork can write it; `ops/tickwork.example.toml` is a link to the same file.
"""

from importlib.resources import files

EXAMPLE_FILE = "tickwork.example.toml"


def example_config() -> str:
    """The example configuration's text, as `tickwork init` writes it."""
    return files(__package__).joinpath(EXAMPLE_FILE).read_text(encoding="utf-8")
