"""The governor's limits: part of every tick's payload, and what the proxy enforces.

They are plain data here so that the payload, the configuration and the governor share
one definition without any of them importing the governor's code.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

MIN_RATIO = 0.8
MAX_RATIO = 8.0
"""Bounds of a believable chars-per-token ratio, configured or learned."""

HARD_MARGIN = 5_000
"""Tokens between the soft threshold and the hard ceiling unless one is configured."""

DEFAULT_DIRECTIVE = (
    "[governor] This conversation is now about {est} tokens, past its budget of {threshold}. "
    "Wrap up: finish the step you are on, then answer with a short summary of what is done "
    "and what is left, without starting new tool calls."
)
DEFAULT_STOP = (
    "[governor] Stopped before calling the model: the request is about {est} tokens, past "
    "the hard ceiling of {threshold}. Start a fresh session with a summary of the work so far."
)


def model_key(model: str) -> str:
    """Exemptions match the last path segment: `openrouter/anthropic/claude-x` is `claude-x`."""
    return model.rstrip("/").rsplit("/", 1)[-1]


class GovernorLimits(BaseModel):
    """The limits a tick runs under (part of its payload) and the proxy enforces."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    soft_tokens: Annotated[int, Field(gt=0)] = 60_000
    hard_tokens: Annotated[int, Field(ge=0)] | None = None
    """Default: soft + 5,000; 0 disables the hard stop."""
    chars_per_token: Annotated[float, Field(ge=MIN_RATIO, le=MAX_RATIO)] = 3.2
    """Where a model without samples starts."""
    calibrate: bool = True
    """Learn each model's ratio from the prompt tokens its responses report."""
    exempt_models: tuple[str, ...] = ()
    """Measured and calibrated, never cut (matched on the model name's last path segment)."""
    directive: Annotated[str, Field(min_length=1)] = DEFAULT_DIRECTIVE
    stop_message: Annotated[str, Field(min_length=1)] = DEFAULT_STOP

    @model_validator(mode="after")
    def _ceiling_above_threshold(self) -> GovernorLimits:
        if self.hard_tokens and self.hard_tokens <= self.soft_tokens:
            raise ValueError(
                f"hard_tokens ({self.hard_tokens}) must be above soft_tokens "
                f"({self.soft_tokens}), or 0 to disable the hard stop"
            )
        return self

    @property
    def hard(self) -> int:
        """The ceiling that stops a request: soft + `HARD_MARGIN` unless set; 0 disables it."""
        return self.soft_tokens + HARD_MARGIN if self.hard_tokens is None else self.hard_tokens

    def exempt(self, model: str) -> bool:
        """Whether the model is measured but never cut: its last path segment, case ignored."""
        key = model_key(model).lower()
        return any(model_key(name).lower() == key for name in self.exempt_models)
