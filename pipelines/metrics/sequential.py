"""Always-valid inference: intervals and p-values that may be looked at after every cycle (no peeking penalty).

The mixture sequential probability ratio test (mSPRT) of Johari, Koomen, Pekelis, Walsh ("Always Valid
Inference: Continuous Monitoring of A/B Tests", Operations Research 2022), for an estimate theta_hat that is
approximately normal with variance V (which shrinks as data accrue), mixing the alternative over
theta ~ N(theta_0, tau^2):

    Lambda = sqrt(V / (V + tau^2)) * exp(tau^2 (theta_hat - theta_0)^2 / (2 V (V + tau^2)))

Under H0: theta = theta_0, Lambda is a (asymptotic) martingale with mean 1, so by Ville's inequality
P(Lambda ever >= 1/alpha) <= alpha. Inverting it gives the confidence sequence

    theta_hat +- sqrt( V (V + tau^2) / tau^2 * ( 2 ln(1/alpha) + ln((V + tau^2) / V) ) )

which covers theta at every look simultaneously with probability >= 1 - alpha, and the always-valid p-value
p = min(1, 1/Lambda), whose running minimum over looks is still valid. Here theta_hat is the cumulative relative
change (all cycles so far) and V its delta-method (or bootstrap) variance; tau is `ab.sequential_tau`.

The treatment arm is a lineage whose checkpoint changes every cycle, so the cumulative change estimates the
running average of the per-cycle effects; the interval covers that average (Waudby-Smith et al. 2024,
"Time-uniform central limit theory and asymptotic confidence sequences"), and the running-minimum p-value tests
"the lineage has had no effect in any cycle". Intervals of earlier looks are not intersected, since the
target moves with the lineage.
"""

from __future__ import annotations

import math


def halfwidth(var: float, tau: float, alpha: float) -> float:
    """Half-width of the mSPRT confidence sequence at variance `var`."""
    t2 = tau * tau
    return math.sqrt(var * (var + t2) / t2 * (2 * math.log(1 / alpha) + math.log((var + t2) / var)))


def absolute_tau(tau: float, control: float | None) -> float:
    """The mixing scale of an absolute change: `tau` is relative (`ab.sequential_tau`), so it is tau x |control|,
    or tau itself when the control's value is 0 or unknown."""
    return tau * abs(control) if control else tau


def interval(est: float | None, var: float | None, tau: float, alpha: float) -> tuple[float | None, float | None]:
    if est is None or var is None or not var > 0:
        return None, None
    h = halfwidth(var, tau, alpha)
    return est - h, est + h


def p_value(est: float | None, var: float | None, tau: float, null: float = 0.0) -> float | None:
    """Always-valid p-value min(1, 1/Lambda) of H0: theta = null at this look."""
    if est is None or var is None or not var > 0:
        return None
    t2 = tau * tau
    log_lambda = 0.5 * math.log(var / (var + t2)) + t2 * (est - null) ** 2 / (2 * var * (var + t2))
    return 1.0 if log_lambda <= 0 else math.exp(-log_lambda)
