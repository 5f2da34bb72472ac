"""The least-squares solver the calibration fit runs (``fitting.py`` decides on what rows): Levenberg–Marquardt on
a backend's constants, bounded through a logistic map, minimising a robust soft-L1 loss of each row's log error
plus a pull toward the prior it starts from."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from operator import mul

from .priors import with_constants
from .roofline import PARAM_BOUNDS, Efficiency

#: The fitted constants: all of roofline.PARAM_BOUNDS.
PARAMS = tuple(PARAM_BOUNDS)
#: Weight of the pull toward the prior, per constant, against one row's squared log error.
PRIOR_WEIGHT = 0.5
#: Scale of the soft-L1 loss on log errors: rows off by more than ~20% count linearly, not squared.
LOSS_SCALE = 0.2
#: Offsets that keep log() finite for constants whose bound is 0.
_LOG_OFFSET = {"t_layer": 10e-6, "deq_bytes": 0.1}
def _to_z(name: str, v: float) -> float:
    lo, hi = PARAM_BOUNDS[name]
    p = min(max((v - lo) / (hi - lo), 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def _from_z(name: str, z: float) -> float:
    lo, hi = PARAM_BOUNDS[name]
    return lo + (hi - lo) / (1 + math.exp(-max(-40.0, min(40.0, z))))


def _glog(name: str, v: float) -> float:
    return math.log(v + _LOG_OFFSET.get(name, 0.0))


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    k = len(b)
    m = [row[:] + [bv] for row, bv in zip(a, b)]
    for c in range(k):
        p = max(range(c, k), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(k):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [u - f * v for u, v in zip(m[r], m[c])]
    return [m[i][k] / m[i][i] for i in range(k)]


Evaluator = Callable[[Efficiency], float]  # a row's log(predicted / measured) under some constants


#: The pull toward the published fit when the user's own runs anchor a backend (calibrate --runs): weaker, so
#: their box's measurements decide what they constrain, and the published fit holds only the rest.
ANCHOR_PRIOR_WEIGHT = 0.05


def _normal_equations(residuals: Callable[[list[float]], tuple[list[float], list[float]]], z: list[float],
                      rs: list[float], pr: list[float], wts: list[float],
                      h: float) -> tuple[list[list[float]], list[float]]:
    """JᵀJ and Jᵀr of the weighted residuals at ``z``, the Jacobian by forward differences of step ``h``."""
    res = [w * r for w, r in zip(wts, rs)] + pr
    jac_cols = []
    for j in range(len(z)):
        zj = z[:]
        zj[j] += h
        rj, pj = residuals(zj)
        jac_cols.append([(w * (a - b)) / h for w, a, b in zip(wts, rj, rs)] + [(a - b) / h for a, b in zip(pj, pr)])
    k = len(z)
    # JᵀJ is symmetric, and x·y is y·x to the bit: each product summed once, in the columns' order
    jtj = [[0.0] * k for _ in range(k)]
    for i in range(k):
        for j in range(i, k):
            jtj[i][j] = jtj[j][i] = sum(map(mul, jac_cols[i], jac_cols[j]))
    jtr = [sum(map(mul, jac_cols[i], res)) for i in range(k)]
    return jtj, jtr


def fit_constants(rows: Sequence[Evaluator], start: Efficiency, iterations: int = 40,
                  prior_weight: float = PRIOR_WEIGHT, fixed: frozenset[str] = frozenset()) -> Efficiency:
    """Levenberg–Marquardt on the constants (bounded through a logistic map), minimising the soft-L1 loss
    of each row's log error plus PRIOR_WEIGHT·(log θ − log θ_prior)² per constant."""
    names = tuple(n for n in PARAMS if n not in fixed)
    z = [_to_z(n, getattr(start, n)) for n in names]
    g0 = [_glog(n, getattr(start, n)) for n in names]
    wp = math.sqrt(prior_weight)

    def residuals(zs: list[float]) -> tuple[list[float], list[float]]:
        eff = with_constants(start, {n: _from_z(n, v) for n, v in zip(names, zs)})
        rs = [f(eff) for f in rows]
        prior_r = [wp * (_glog(n, getattr(eff, n)) - g) for n, g in zip(names, g0)]
        return rs, prior_r

    def loss(rs: list[float], pr: list[float]) -> float:
        s2 = LOSS_SCALE**2
        return sum(2 * s2 * (math.sqrt(1 + r * r / s2) - 1) for r in rs) + sum(p * p for p in pr)

    rs, pr = residuals(z)
    cur = loss(rs, pr)
    lam = 1e-2
    h = 1e-4
    for _ in range(iterations):
        # IRLS weights of the soft-L1 loss, then a damped Gauss–Newton step on the weighted residuals
        wts = [1 / math.sqrt(math.sqrt(1 + r * r / LOSS_SCALE**2)) for r in rs]
        jtj, jtr = _normal_equations(residuals, z, rs, pr, wts, h)
        k = len(names)
        improved = False
        for _ in range(8):
            a = [[jtj[i][j] + (lam * (jtj[i][i] + 1e-9) if i == j else 0.0) for j in range(k)] for i in range(k)]
            step = _solve(a, [-v for v in jtr])
            if step is None:
                lam *= 10
                continue
            zn = [v + s for v, s in zip(z, step)]
            rn, pn = residuals(zn)
            new = loss(rn, pn)
            if new < cur:
                z, rs, pr = zn, rn, pn
                improved = cur - new > 1e-10 * (1 + cur)
                cur = new
                lam = max(lam / 3, 1e-7)
                break
            lam *= 10
        if not improved:
            break
    return with_constants(start, {n: _from_z(n, v) for n, v in zip(names, z)})
