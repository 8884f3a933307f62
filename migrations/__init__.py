"""Alembic environment and versions: the only place the schema is defined."""
