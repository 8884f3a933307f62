"""What the governor does with a measured request: pass, soft, defer or hard.

One policy for the tick hook and the proxy; each of them only says what the end of its
message chain looks like (`Tail`) and carries the decision out in its own way.

The wrap-up directive goes in as the last user message (OpenAI), which is safe only after
a user message or a finished assistant answer, or into the system prompt (Anthropic),
which is always safe. After an assistant turn with open tool calls, or after a tool
result, an extra user message breaks the call/result pairing that providers check (or the
chat template of a local model), so the directive waits for a later turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.contracts import GovernorFired, GovernorLimits
from harness.governor.estimate import tokens_from_chars

Decision = Literal["pass", "soft", "defer", "hard"]
Tail = Literal["user", "assistant", "open_tool_calls", "tool_result", "empty", "system"]
"""How a request's chain ends where the directive would go; `system`: the directive goes
into the system prompt (Anthropic), which any chain can take."""


def fill(template: str, est: int, threshold: int) -> str:
    """The placeholders are replaced literally: other braces in an operator's text stay."""
    return template.replace("{est}", str(est)).replace("{threshold}", str(threshold))


def chain_allows_directive(tail: Tail) -> bool:
    """Whether a directive can be appended after this tail: not after open tool calls or results."""
    return tail in ("user", "assistant", "empty", "system")


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
        """What the model is told: the stop message for a hard decision, else the directive."""
        template = limits.stop_message if self.decision == "hard" else limits.directive
        return fill(template, self.est_tokens, self.threshold)

    @classmethod
    def of_event(cls, fired: GovernorFired) -> Verdict:
        """The verdict a recorded decision was made of (to tell an operator after the fact)."""
        return cls(
            fired.decision,
            fired.model,
            fired.chars,
            fired.est_tokens,
            fired.chars_per_token,
            fired.threshold,
        )

    def event(self, source: Literal["worker", "proxy"], tick_id: str | None) -> GovernorFired:
        """The decision as the event both the worker and the proxy record."""
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
    """The governor's one rule: pass, soft, defer or hard for a request of `chars` characters."""
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
