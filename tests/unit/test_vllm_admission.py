"""Admission of calls by KV room (recontext_engine.readout.vllm.admission)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from recontext_engine.readout.vllm.admission import KVAdmission
from recontext_engine.readout.vllm.backend import kv_capacity


class Call(threading.Thread):
    """A call holding ``tokens`` of room until ``release`` is set; ``admitted`` once it runs."""

    def __init__(self, admission: KVAdmission, tokens: int) -> None:
        super().__init__(daemon=True)
        self.admission, self.tokens = admission, tokens
        self.admitted, self.release = threading.Event(), threading.Event()

    def run(self) -> None:
        with self.admission.admitted(self.tokens):
            self.admitted.set()
            self.release.wait(10)


def start(admission: KVAdmission, tokens: int) -> Call:
    call = Call(admission, tokens)
    call.start()
    return call


def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_calls_wait_for_room_and_run_once_it_is_freed():
    admission = KVAdmission(100)
    first, second = start(admission, 30), start(admission, 30)
    assert first.admitted.wait(5) and second.admitted.wait(5)
    # 60 held: a third call of 30 would fit, but not the next call's first pass besides (60 + 2 * 30 > 100)
    third = start(admission, 30)
    wait_until(lambda: admission.waiting == 1)
    assert not third.admitted.is_set() and admission.held == 60
    first.release.set()
    assert third.admitted.wait(5)
    assert admission.held == 60 and admission.running == 2
    second.release.set()
    third.release.set()
    for call in (first, second, third):  # every call has left, not only the last one released
        call.join(5)
    assert admission.held == 0 and admission.running == 0


def test_calls_are_admitted_first_come_first_served():
    admission = KVAdmission(100)
    first = start(admission, 40)
    assert first.admitted.wait(5)
    big = start(admission, 40)
    wait_until(lambda: admission.waiting == 1)
    small = start(admission, 10)  # it would fit now, but it came after the big call
    wait_until(lambda: admission.waiting == 2)
    assert not small.admitted.is_set()
    first.release.set()
    assert big.admitted.wait(5) and small.admitted.wait(5)
    assert admission.held == 50
    big.release.set()
    small.release.set()


def test_a_call_larger_than_half_the_cache_runs_alone():
    admission = KVAdmission(100)
    small = start(admission, 10)
    assert small.admitted.wait(5)
    huge = start(admission, 60)
    wait_until(lambda: admission.waiting == 1)
    small.release.set()
    assert huge.admitted.wait(5) and admission.held == 60
    huge.release.set()
    huge.join(5)


def test_an_error_in_the_call_frees_its_room():
    admission = KVAdmission(100)
    with pytest.raises(RuntimeError), admission.admitted(80):
        raise RuntimeError("read failed")
    assert admission.held == 0 and admission.running == 0
    with admission.admitted(40), admission.admitted(10):  # room for both (and the next call's pass)
        assert admission.held == 50


def test_no_capacity_admits_every_call_at_once():
    admission = KVAdmission(None)
    calls = [start(admission, 10**9) for _ in range(3)]
    assert all(call.admitted.wait(5) for call in calls)
    for call in calls:
        call.release.set()


@pytest.mark.parametrize(
    ("cache_config", "want"),
    [
        (SimpleNamespace(num_gpu_blocks=182, block_size=128), 23296),
        (SimpleNamespace(num_gpu_blocks=None, block_size=16), None),  # not profiled yet
        (SimpleNamespace(num_gpu_blocks=0, block_size=16), None),
        (None, None),
    ],
)
def test_kv_capacity_from_vllms_cache_config(cache_config, want):
    engine = SimpleNamespace(vllm_config=SimpleNamespace(cache_config=cache_config))
    assert kv_capacity(engine) == want
    assert kv_capacity(SimpleNamespace()) is None
