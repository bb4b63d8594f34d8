#!/usr/bin/env python3
"""Fits the generator's normal noise (sim/workload/gen.c, gen_normal): the normal
quantile at p = (u + 1/2) / 65536 for a 16-bit piece u of the random stream,
approximated by an odd (3,3) rational in v = p - 1/2,

    x(v) = v * (P0 + P1 r + P2 r^2) / (1 + Q0 r + Q1 r^2 + Q2 r^3),  r = v^2,

because it costs a few fused multiply-adds and one division per eight values
in AVX2 (a table needs a scalar read per value) and every path computes it
to the same bits. Fitted by Loeb's linearised least squares on the error in
probability (weight pdf(x)^2), then reweighted towards the largest errors
(a minimax-like finish). Plain Python (statistics.NormalDist), a
few seconds. Prints the coefficients as C float literals and the distribution of
the 65,536 values (tests/test_gen.c checks the same of the C function).

    python3 scripts/fit_noise.py
"""
import struct
from statistics import NormalDist

N = NormalDist()
NP, NQ = 3, 3  # P's coefficients; Q's beyond its leading 1


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def solve(a, b):
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        piv = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[piv] = m[piv], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def value(p, q, v):
    r = v * v
    num = 0.0
    for c in reversed(p):
        num = num * r + c
    den = 0.0
    for c in reversed(q):
        den = den * r + c
    return v * num / (den * r + 1)


def main():
    # points on v in (0, 1/2), denser towards the tail, down to the last
    # piece's p (odd symmetry covers v < 0)
    pts = []
    for i in range(8000):
        t = 0.5 * (1 - (i + 0.5) / 8000) ** 3
        if t >= 0.5 / 65536:
            pts.append((0.5 - t, N.inv_cdf(1 - t)))
    p, q, w = [2.5] + [0.0] * (NP - 1), [0.0] * NQ, [1.0] * len(pts)
    for it in range(60):
        n = NP + NQ
        a = [[0.0] * n for _ in range(n)]
        b = [0.0] * n
        for k, (v, x) in enumerate(pts):
            r = v * v
            qo = 0.0
            for c in reversed(q):
                qo = qo * r + c
            qo = qo * r + 1
            wt = N.pdf(x) ** 2 * w[k] / qo**2
            # x * Q(r) - v * P(r) = 0, linear in the coefficients
            phi = [v * r**j for j in range(NP)] + [-x * r ** (j + 1) for j in range(NQ)]
            for i in range(n):
                b[i] += wt * phi[i] * x
                for j in range(n):
                    a[i][j] += wt * phi[i] * phi[j]
        sol = solve(a, b)
        p, q = sol[:NP], sol[NP:]
        if it >= 20:
            err = [abs(N.cdf(value(p, q, v)) - (v + 0.5)) for v, _ in pts]
            top = max(err)
            w = [wi * (0.5 + e / top) for wi, e in zip(w, err)]
    p, q = [f32(c) for c in p], [f32(c) for c in q]
    for name, cs in (("P", p), ("Q", q)):
        for j, c in enumerate(cs):
            print(f"{name}{j} = {c:.9g}f")
    xs = [value(p, q, (u + 0.5) / 65536 - 0.5) for u in range(65536)]
    ks = max(max(abs(N.cdf(x) - (u + 1) / 65536), abs(N.cdf(x) - u / 65536)) for u, x in enumerate(xs))
    var = sum(x * x for x in xs) / 65536
    kurt = sum(x**4 for x in xs) / 65536 / var**2
    print(f"KS distance {ks:.2e}, variance {var:.5f}, kurtosis {kurt:.4f}, ends ±{xs[-1]:.3f}")


if __name__ == "__main__":
    main()
