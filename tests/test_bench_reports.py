"""The benchmark reports' pure pieces (bench/bench_paired.py, bench/profile_ops.py): which
speed goals a run meets, and how long kernels overlap in a profile."""

import importlib
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, BENCH)
    try:
        yield importlib.import_module("bench_paired"), importlib.import_module("profile_ops")
    finally:
        sys.path.remove(BENCH)


def _encoder(dtype, mode, ratio, pooled):
    sustained = {"pooled": pooled} if pooled is not None else None
    return {
        "dtype": dtype,
        "mode": mode,
        "ratio": ratio,
        "ratio_min": ratio - 0.1,
        "ratio_max": ratio + 0.1,
        "sustained": sustained,
    }


def test_target_lines_mark_each_goal_met_or_not(bench):
    paired = bench[0]
    encoder = [
        _encoder("float32", "infer", 1.26, 0.84),  # ratio met, MFU (85%) missed
        _encoder("float32", "train", 1.09, 0.95),  # ratio missed, no MFU goal
        _encoder("mixed_bfloat16", "train", 1.2, 0.8),  # both exactly at the goal
    ]
    pretraining = [{"seq": 128, "ratio": 1.71, "ratio_min": 1.6, "ratio_max": 1.96}]
    rows = [line for line in paired.target_lines(encoder, pretraining) if line.startswith("| ")]
    assert rows[1:] == [
        "| float32 inference >= 1.1x keras-hub | 1.26x (1.16-1.36) | yes |",
        "| float32 inference >= 85% of the sustained peak probe (pooled) | 84% | **no** |",
        "| float32 fwd+bwd >= 1.1x keras-hub | 1.09x (0.99-1.19) | **no** |",
        "| mixed_bfloat16 fwd+bwd >= 1.2x keras-hub | 1.20x (1.10-1.30) | yes |",
        "| mixed_bfloat16 fwd+bwd >= 80% of the sustained peak probe (pooled) | 80% | yes |",
        "| pretraining step at seq 128: bfloat16 >= 2.2x our float32 | 1.71x (1.60-1.96) "
        "| **no** |",
    ]


def test_target_lines_empty_without_measured_goals(bench):
    paired = bench[0]
    assert paired.target_lines([], []) == []
    assert paired.target_lines([_encoder("float32", "classify", 1.3, None)], []) == []


def test_kernels_running_splits_the_span_by_overlap(bench):
    profile = bench[1]
    spans = profile.kernels_running([(0, 10), (5, 20), (30, 40), (32, 34)])
    assert dict(spans) == {1: 5 + 10 + 2 + 6, 2: 5 + 2, 0: 10}
    assert sum(spans.values()) == 40
    assert dict(profile.kernels_running([])) == {}
