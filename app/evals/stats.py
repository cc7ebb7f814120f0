"""Pass rates with their uncertainty: the Wilson score interval, which stays inside [0, 1] and is sound for the
few repeats an eval runs (unlike the normal approximation, which says 0 ± 0 after 5 fails out of 5)."""

from __future__ import annotations

import math
from dataclasses import dataclass

Z_95 = 1.959963984540054


@dataclass(frozen=True)
class PassRate:
    passed: int
    runs: int
    low: float  # the 95% interval
    high: float

    @property
    def rate(self) -> float | None:
        return self.passed / self.runs if self.runs else None

    def describe(self) -> str:
        if not self.runs:
            return "no runs"
        return f"{100 * self.passed / self.runs:.0f}% ({self.passed}/{self.runs}; 95% {100 * self.low:.0f}–" \
               f"{100 * self.high:.0f}%)"


def pass_rate(passed: int, runs: int, z: float = Z_95) -> PassRate:
    if not 0 <= passed <= runs:
        raise ValueError(f"{passed} passed out of {runs} runs")
    if runs == 0:
        return PassRate(0, 0, 0.0, 1.0)
    share = passed / runs
    denominator = 1 + z * z / runs
    centre = (share + z * z / (2 * runs)) / denominator
    half = z * math.sqrt(share * (1 - share) / runs + z * z / (4 * runs * runs)) / denominator
    return PassRate(passed, runs, max(0.0, centre - half), min(1.0, centre + half))
