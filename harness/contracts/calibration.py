"""The chars-per-token learner: pure, deterministic and plain data.

Plain data in `contracts` so that the calibration projection folds recorded samples with
the very rule the governor learns with live, and a tick payload can carry the state,
without the projections and the governor importing each other.

The ratio of a model is the median of its last `WINDOW` accepted samples (the configured
value until the first one): one sample is enough to leave a bad default, and a median
of fifteen does not move for a single odd request. A sample is ignored when

- the request is tiny (a few hundred characters say more about the chat template than
  about the text), or its ratio falls outside the bounds 0.8 to 8.0;
- once `WARMUP` samples are in, its ratio is more than `TOLERANCE` away from the median.

Servers that reuse their KV cache (llama.cpp, Ollama) may report only the prompt tokens
they computed, not the cached prefix. Where the server says so (llama.cpp's `timings`
give `cache_n` next to `prompt_n`) the sample is marked `cached` and the cached tokens are
added back. Where it does not (Ollama), the count is too low, the ratio too high: such a
sample lands above the bounds or far above the median and is dropped as an outlier.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Literal

from harness.contracts.events import CalibrationSampled
from harness.contracts.governor import MAX_RATIO, MIN_RATIO

MIN_CHARS = 1000
WINDOW = 15
WARMUP = 3
TOLERANCE = 0.35

Verdict = Literal["accepted", "tiny", "out_of_bounds", "outlier"]


@dataclass(frozen=True)
class Sample:
    """What one response taught: the request's size and the prompt tokens it was billed."""

    chars: int
    prompt_tokens: int
    cached_tokens: int | None = None
    cached: bool = False
    """True when `prompt_tokens` leaves out the `cached_tokens` the server reused."""

    @property
    def tokens(self) -> int:
        """The tokens the request really took, cached prefix included, so ratios stay comparable."""
        return self.prompt_tokens + (self.cached_tokens or 0 if self.cached else 0)

    @property
    def tiny(self) -> bool:
        """Too small to teach anything: not worth an event either."""
        return self.chars < MIN_CHARS or self.tokens <= 0

    def event(
        self,
        model: str,
        source: Literal["worker", "proxy"],
        tick_id: str | None,
    ) -> CalibrationSampled:
        """The sample as an event, so projections and the live governor fold the same record."""
        return CalibrationSampled(
            model=model,
            source=source,
            tick_id=tick_id,
            chars=self.chars,
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            cached=self.cached,
        )


@dataclass(frozen=True)
class Calibration:
    """One model's learned state; `window` holds the latest accepted ratios, oldest first."""

    window: tuple[float, ...] = ()
    samples: int = 0
    ignored: int = 0

    def ratio(self, initial: float) -> float:
        """Chars per token to estimate with: the window's median, `initial` before any sample."""
        return statistics.median(self.window) if self.window else initial

    def judge(self, sample: Sample) -> Verdict:
        """Whether a sample may teach the ratio, and if not, why (the reason is counted)."""
        if sample.tiny:
            return "tiny"
        observed = sample.chars / sample.tokens
        if not MIN_RATIO <= observed <= MAX_RATIO:
            return "out_of_bounds"
        if len(self.window) >= WARMUP:
            current = statistics.median(self.window)
            if abs(observed - current) > TOLERANCE * current:
                return "outlier"
        return "accepted"

    def observe(self, sample: Sample) -> tuple[Calibration, Verdict]:
        """The state after one more sample, and its verdict; ignored samples are only counted."""
        verdict = self.judge(sample)
        if verdict != "accepted":
            return replace(self, ignored=self.ignored + 1), verdict
        window = (*self.window, round(sample.chars / sample.tokens, 6))[-WINDOW:]
        return Calibration(window, self.samples + 1, self.ignored), verdict
