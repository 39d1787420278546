"""Sample-ratio mismatch: are the arms' user counts what the router's split says they should be?

Pearson's chi-square goodness-of-fit test on the number of distinct users per arm against the configured
shares: chi2 = sum_a (observed_a - expected_a)^2 / expected_a, df = arms - 1, p = P(chi2_df >= chi2). A p-value
below the threshold (0.001 by default, as GrowthBook, Eppo and Statsig use) flags the result: the assignment or
the logging is broken (users lost by one arm, bots, a crash), and no metric of that cycle should be trusted.
Users, not requests, are counted: the treatment may change how many requests a user makes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from scipy.stats import chi2 as chi2_dist


@dataclass(frozen=True)
class SrmResult:
    observed: dict[str, int]
    expected: dict[str, float]
    chi2: float
    df: int
    p_value: float
    threshold: float
    flagged: bool

    def to_dict(self) -> dict:
        return asdict(self)


def srm_check(observed: dict[str, int], shares: dict[str, float], threshold: float = 0.001) -> SrmResult:
    """Chi-square test of `observed` counts per arm against `shares` (normalized to sum to 1)."""
    total_share = sum(shares.values())
    n = sum(observed.get(a, 0) for a in shares)
    expected = {a: n * s / total_share for a, s in shares.items()}
    if n == 0:
        return SrmResult({a: 0 for a in shares}, expected, 0.0, len(shares) - 1, 1.0, threshold, False)
    chi2 = sum((observed.get(a, 0) - e) ** 2 / e for a, e in expected.items() if e > 0)
    df = len(shares) - 1
    p = float(chi2_dist.sf(chi2, df))
    return SrmResult({a: int(observed.get(a, 0)) for a in shares}, expected, float(chi2), df, p, threshold,
                     p < threshold)
