"""bench/ring_attention_bench.py at a small size: ring attention's peak
memory per rank over a forward and backward is well under full attention's
at the same sequence length (about 1/cp of it), and both give the same
gradients."""
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import ring_attention_bench  # noqa: E402


def test_ring_attention_peak_memory_is_a_fraction_of_full_attention():
    results = ring_attention_bench.measure(cp=4, seq=256, heads=2, dim=16)
    by = {r["kind"]: r for r in results}
    full, ring = max(by["full"]["peak_rise"]), max(by["ring"]["peak_rise"])
    assert ring < 0.5 * full, (ring, full)
    assert by["ring"]["check"] == pytest.approx(by["full"]["check"], rel=1e-3, abs=1e-3)
    assert "| ring | 4 | 256 |" in ring_attention_bench.table(results)
