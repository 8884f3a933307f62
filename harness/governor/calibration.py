"""Every model's chars-per-token ratio in one process, learned as its requests are answered.

The learner itself (`Calibration`, `Sample`) is plain data in `harness.contracts.calibration`:
the calibration projection folds recorded samples with the same rule, and a tick starts
from the state the runner hands it in its payload.
"""

from __future__ import annotations

from harness.contracts import Calibration, Sample, Verdict


class Calibrations:
    """The ratios of every model a process has seen, started from the projection's.

    Not thread-safe on its own: the proxy touches it from its event loop only, a tick from
    its agent loop only.
    """

    def __init__(
        self,
        initial: float,
        learned: dict[str, Calibration] | None = None,
        enabled: bool = True,
    ) -> None:
        self.initial = initial
        self.enabled = enabled
        self.models: dict[str, Calibration] = dict(learned or {})

    def ratio(self, model: str) -> float:
        """The ratio for `model`'s estimates; the configured one when not calibrating."""
        if not self.enabled:
            return self.initial
        return self.models.get(model, Calibration()).ratio(self.initial)

    def learn(self, model: str, sample: Sample) -> Verdict:
        """Teach the model's ratio one sample; the verdict says whether it was taken."""
        updated, verdict = self.models.get(model, Calibration()).observe(sample)
        self.models[model] = updated
        return verdict
