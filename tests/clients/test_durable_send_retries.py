"""A durable send's produce request: the first attempt is made directly, a timed-out one retried `retries` times.

The sender calls the transport once for the usual request and enters its retry loop only after a
timeout (issue 26: the one-record durable send pays for no retry machinery). These tests count the
requests a lost-request fault plan sees, so they fail if the first attempt and the retries were
counted differently from Kafka's `retries` (one attempt plus `retries` retries).
"""

from __future__ import annotations

import pytest

from storage import Store
from txlog.clients.producer import Producer
from txlog.errors import RequestTimedOutError
from txlog.tools.fault_injection import Action, FaultInjectingTransport, FaultPlan, Step, StepFault
from txlog.transport import Transport


def lost_requests(store: Store, count: int) -> FaultInjectingTransport:
    """A transport whose first `count` Produce requests are lost (never reach the log)."""
    faults = [StepFault(Step.PRODUCE, Action.LOSE_REQUEST, n) for n in range(1, count + 1)]
    return FaultInjectingTransport(Transport(store), FaultPlan(steps=faults))


def values(store: Store) -> list[bytes]:
    return [r.value for b in store.partition("t", 0).read(0) for r in b.records()]


@pytest.mark.parametrize(("lost", "retries"), [(1, 1), (2, 2), (3, 5)])
def test_a_lost_request_is_retried_until_it_lands(store, lost, retries):
    store.create_topic("t", 1)
    transport = lost_requests(store, lost)
    with Producer(store, retries=retries, transport=transport) as p:
        assert p.send("t", b"v").get().offset == 0  # a blocking get(): the round runs on this thread
    assert transport.plan.calls[Step.PRODUCE] == lost + 1
    assert values(store) == [b"v"]


@pytest.mark.parametrize(("lost", "retries"), [(1, 0), (2, 1), (4, 3)])
def test_a_request_lost_more_often_than_its_retries_fails_the_send(store, lost, retries):
    store.create_topic("t", 1)
    transport = lost_requests(store, lost)
    with Producer(store, retries=retries, transport=transport) as p, pytest.raises(RequestTimedOutError):
        p.send("t", b"v").get()
    assert transport.plan.calls[Step.PRODUCE] == retries + 1
    assert values(store) == []
