"""What the governor does with a measured request: pass, soft, defer or hard.

One policy for the tick hook and the proxy; each of them only says what the end of its
message chain looks like (`Tail`) and carries the decision out in its own way.

The wrap-up directive goes in as the last user message, which is safe only after a user
message or a finished assistant answer. After an assistant turn with open tool calls, or
after a tool result, an extra user message breaks the call/result pairing that providers
check (or the chat template of a local model), so the directive waits for a later turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.contracts.calibration import MAX_RATIO, MIN_RATIO
from harness.contracts.events import GovernorFired
from harness.governor.estimate import tokens_from_chars

Decision = Literal["pass", "soft", "defer", "hard"]
Tail = Literal["user", "assistant", "open_tool_calls", "tool_result", "empty"]

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


def fill(template: str, est: int, threshold: int) -> str:
    """The placeholders are replaced literally: other braces in an operator's text stay."""
    return template.replace("{est}", str(est)).replace("{threshold}", str(threshold))


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
        return self.soft_tokens + HARD_MARGIN if self.hard_tokens is None else self.hard_tokens

    def exempt(self, model: str) -> bool:
        key = model_key(model)
        return any(model_key(name) == key for name in self.exempt_models)


def chain_allows_directive(tail: Tail) -> bool:
    return tail in ("user", "assistant", "empty")


@dataclass(frozen=True)
class Verdict:
    """One decision with what it was based on; `threshold` is 0 for a pass."""

    decision: Decision
    model: str
    chars: int
    est_tokens: int
    ratio: float
    threshold: int

    def text(self, limits: GovernorLimits) -> str:
        template = limits.stop_message if self.decision == "hard" else limits.directive
        return fill(template, self.est_tokens, self.threshold)

    def event(self, source: Literal["worker", "proxy"], tick_id: str | None) -> GovernorFired:
        if self.decision == "pass":
            raise ValueError("a pass is not an event: only soft, defer and hard are recorded")
        return GovernorFired(
            model=self.model,
            source=source,
            tick_id=tick_id,
            decision=self.decision,
            est_tokens=self.est_tokens,
            threshold=self.threshold,
            chars=self.chars,
            chars_per_token=self.ratio,
        )


def decide(limits: GovernorLimits, model: str, chars: int, ratio: float, tail: Tail) -> Verdict:
    est = tokens_from_chars(chars, ratio)
    decision: Decision = "pass"
    threshold = 0
    if not limits.exempt(model):
        hard = limits.hard
        if hard and est >= hard:
            decision, threshold = "hard", hard
        elif est >= limits.soft_tokens:
            threshold = limits.soft_tokens
            decision = "soft" if chain_allows_directive(tail) else "defer"
    return Verdict(decision, model, chars, est, ratio, threshold)
