"""The P4G donation parser is linear in the length of a reply.

    pytest benchmarks/test_donation_parser.py --benchmark-enable --benchmark-only -s

Hostile replies of 1 KB and 16 KB (bare numbers and "half": every token a candidate amount) are
parsed in the same run; the printed ratio of their times is about 16 for a linear parser (it was
about 256, quadratic, before the parser bounded how far back it reads cues).
"""

from __future__ import annotations

import pytest

from scope_envs.p4g.donation import parse_donation

TIMES: dict[tuple[str, int], float] = {}


@pytest.mark.parametrize("unit", ["1 ", "half "])
@pytest.mark.parametrize("size", [1_024, 16_384])
def test_parse_hostile_reply(benchmark, unit, size):
    text = (unit * (size // len(unit) + 1))[:size]
    benchmark.pedantic(parse_donation, args=(text,), rounds=3, iterations=1)
    TIMES[(unit, size)] = benchmark.stats.stats.median
    if (unit, 1_024) in TIMES and (unit, 16_384) in TIMES:
        ratio = TIMES[(unit, 16_384)] / TIMES[(unit, 1_024)]
        print(f"\n{unit.strip()!r}: 16 KB / 1 KB time ratio {ratio:.1f} (linear: 16, quadratic: 256)")
