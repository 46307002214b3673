"""vitplast_kernels.timing, the one timing helper of the autotuning, `vitplast profile` and bench/ (CPU)."""

from __future__ import annotations

import time

import pytest
import torch

from vitplast_kernels import timing

CPU = torch.device("cpu")


def test_time_once_ms_is_per_call_of_a_batch():
    calls = []

    def sleep():
        calls.append(1)
        time.sleep(0.002)

    t = timing.time_once_ms(sleep, CPU, calls=3)
    assert len(calls) == 3
    assert 1.5 < t < 50  # milliseconds per call, not per batch


def test_time_once_ms_rejects_no_calls():
    with pytest.raises(ValueError, match="calls"):
        timing.time_once_ms(lambda: None, calls=0)


def test_median_ms_runs_warmup_then_reps():
    calls = []
    t = timing.median_ms(lambda: calls.append(1), reps=5, warmup=2)
    assert len(calls) == 7 and t >= 0
    with pytest.raises(ValueError, match="reps"):
        timing.median_ms(lambda: None, reps=0)


def test_interleaved_samples_rotate_the_order():
    order = []
    fns = {name: (lambda name=name: order.append(name)) for name in "abc"}
    samples = timing.interleaved_samples(fns, device=CPU, rounds=3, warmup=0)
    assert order == list("abc" "bca" "cab")
    assert {k: len(v) for k, v in samples.items()} == {"a": 3, "b": 3, "c": 3}


def test_interleaved_rounds_reverse_the_order_every_other_cycle():
    order = []
    fns = {name: (lambda name=name: order.append(name)) for name in "abcd"}
    timing.interleaved_samples(fns, device=CPU, rounds=8, warmup=0)
    rounds = ["".join(order[i:i + 4]) for i in range(0, 32, 4)]
    assert rounds == ["abcd", "bcda", "cdab", "dabc", "dcba", "cbad", "badc", "adcb"]
    # each function follows both of its neighbours, not always the same one
    before = {name: {r[r.index(name) - 1] for r in rounds if r.index(name) > 0} for name in "abcd"}
    assert before == {"a": {"b", "d"}, "b": {"a", "c"}, "c": {"b", "d"}, "d": {"a", "c"}}


def test_interleaved_samples_settle_each_function_before_its_sample(monkeypatch):
    # a settling call of the same function right before each timed one, which alone is recorded
    order, timed = [], []

    def make(name):
        def fn():
            order.append(name)
        return fn

    fns = {name: make(name) for name in "ab"}
    real = timing.time_once_ms

    def spy(fn, device=None, **kw):
        timed.append(order[-1])
        return real(fn, device, **kw)

    monkeypatch.setattr(timing, "time_once_ms", spy)
    samples = timing.interleaved_samples(fns, device=CPU, rounds=2, warmup=0, settle=1)
    assert order == list("aabb" "bbaa")
    assert timed == list("abba")  # the settling call of each sample came just before it
    assert {k: len(v) for k, v in samples.items()} == {"a": 2, "b": 2}


def test_interleaved_samples_go_on_until_min_time_and_stop_at_max_rounds():
    fns = {"sleep": lambda: time.sleep(0.001)}
    ts = timing.interleaved_samples(fns, rounds=2, warmup=0, min_time_ms=20.0, max_rounds=1000)["sleep"]
    assert len(ts) >= 2 and sum(ts) >= 20.0
    assert len(ts) == 2 or sum(ts[:-1]) < 20.0  # stops at the first round past min_time_ms
    capped = timing.interleaved_samples(fns, rounds=2, warmup=0, min_time_ms=1e6, max_rounds=4)
    assert len(capped["sleep"]) == 4


def test_samples_of_short_calls_hold_several_calls():
    calls = []
    fast = timing.calls_per_sample(lambda: calls.append(1), min_sample_ms=1.0)
    assert fast > 1 and timing.calls_per_sample(lambda: None) == 1
    samples = timing.interleaved_samples({"fast": lambda: calls.append(1)}, rounds=2, warmup=0,
                                         min_sample_ms=1.0)
    assert len(samples["fast"]) == 2 and len(calls) > 2


def test_interleaved_medians_are_the_samples_medians():
    med = timing.interleaved_medians({"sleep": lambda: time.sleep(0.002), "none": lambda: None}, rounds=3)
    assert med["none"] < med["sleep"] and 1.5 < med["sleep"] < 50


def test_marks_measure_what_runs_between_them():
    start = timing.mark(CPU)
    time.sleep(0.002)
    assert 1.5 < timing.elapsed_ms(start, timing.mark(CPU)) < 50


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_events_time_device_work():
    dev = torch.device("cuda")
    x = torch.randn(4096, 4096, device=dev)
    t = timing.median_ms(lambda: x @ x, device=dev, reps=3, warmup=1)
    wall = timing.time_once_ms(lambda: x @ x, dev, wall=True)
    start = timing.mark(dev)
    x @ x
    between = timing.elapsed_ms(start, timing.mark(dev))
    assert 0 < t and 0 < wall and 0 < between
