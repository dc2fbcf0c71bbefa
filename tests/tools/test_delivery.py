"""Delivery semantics under injected faults: the counts each mode must produce."""

from __future__ import annotations

import pytest

import txlog
from txlog.tools.delivery import DeliveryMode, compare_delivery_semantics, run_mode
from txlog.tools.fault_injection import Fault, FaultInjectingTransport, FaultPlan
from txlog.transport import Transport


def faulty(store, plan: FaultPlan) -> FaultInjectingTransport:
    """The store's transport wrapped in `plan`: what a producer given it meets."""
    return FaultInjectingTransport(Transport(store), plan)


def _by_mode(reports):
    return {r.mode: r for r in reports}


def test_three_semantics_over_the_same_random_faults(store):
    reports = _by_mode(compare_delivery_semantics(store, records=150, fault_rate=0.3, seed=11))
    most, least = reports[DeliveryMode.AT_MOST_ONCE], reports[DeliveryMode.AT_LEAST_ONCE]
    assert most.lost > 0 and most.duplicated == 0
    assert most.lost == most.faults["lose-request"]  # only a request that never arrived is lost
    assert least.lost == 0 and least.duplicated > 0
    for mode in (DeliveryMode.EXACTLY_ONCE, DeliveryMode.EXACTLY_ONCE_TRANSACTIONAL):
        r = reports[mode]
        assert (r.sent, r.written, r.duplicated, r.lost) == (150, 150, 0, 0)
    assert len({tuple(sorted(r.faults.items())) for r in reports.values() if r.mode != DeliveryMode.AT_MOST_ONCE}) == 1


@pytest.mark.parametrize("fault", [Fault.LOSE_REQUEST, Fault.LOSE_ACK, Fault.DUPLICATE])
def test_each_fault_alone(store, fault):
    store.create_topic("d", 1)
    expected = {
        # (lost, duplicated) per mode for one faulted request out of 3
        Fault.LOSE_REQUEST: {
            DeliveryMode.AT_MOST_ONCE: (1, 0),
            DeliveryMode.AT_LEAST_ONCE: (0, 0),
            DeliveryMode.EXACTLY_ONCE: (0, 0),
        },
        Fault.LOSE_ACK: {
            DeliveryMode.AT_MOST_ONCE: (0, 0),
            DeliveryMode.AT_LEAST_ONCE: (0, 1),
            DeliveryMode.EXACTLY_ONCE: (0, 0),
        },
        Fault.DUPLICATE: {
            DeliveryMode.AT_MOST_ONCE: (0, 0),
            DeliveryMode.AT_LEAST_ONCE: (0, 1),
            DeliveryMode.EXACTLY_ONCE: (0, 0),
        },
    }[fault]
    for mode, (lost, dup) in expected.items():
        r = run_mode(store, "d", mode, 3, FaultPlan([Fault.NONE, fault]))
        assert (r.lost, r.duplicated, r.written) == (lost, dup, 3 - lost), mode
        assert r.acknowledged == (2 if mode is DeliveryMode.AT_MOST_ONCE and fault is not Fault.NONE else 3)


def test_lost_ack_retry_is_answered_with_the_original_offsets(store):
    store.create_topic("t", 1)
    p = txlog.Producer(store, transport=faulty(store, FaultPlan([Fault.LOSE_ACK, Fault.LOSE_ACK])), linger_ms=0)
    first = p.send("t", value=b"a")
    p.flush()
    assert first.get().offset == 0
    second = p.send("t", value=b"b")
    p.flush()
    assert second.get().offset == 1
    assert store.partition("t", 0).log_end_offset == 2


def test_unknown_outcome_after_retries_bumps_the_epoch(store):
    """A batch whose fate stays unknown must never have its sequence reused (KIP-360)."""
    store.create_topic("t", 1)
    p = txlog.Producer(
        store, retries=1, transport=faulty(store, FaultPlan([Fault.LOSE_ACK, Fault.LOSE_ACK])), linger_ms=0
    )
    lost = p.send("t", value=b"a")
    p.flush()
    with pytest.raises(txlog.errors.RequestTimedOutError):
        lost.get()
    again = p.send("t", value=b"b")
    assert again.get().offset == 1  # appended, not mistaken for the retry of "a"
    batches = store.partition("t", 0).read(0)
    assert [(b.producer_epoch, b.base_sequence) for b in batches] == [(0, 0), (1, 0)]
