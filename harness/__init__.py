"""tickwork: runs LLM agents on a schedule, with hard caps and a spend ledger of events."""

__version__ = "0.1.0"
