"""rpc.admission.Admission alone: which calls get a worker thread, by connection."""
from __future__ import annotations

import pytest

from contextsvc.errors import Exhausted
from contextsvc.rpc.admission import Admission


def alive():
    return True


def test_callers_one_call_each_on_their_own_connections_stop_at_the_limit():
    """Sixteen connections with one call each fill the limit: the seventeenth connection's call is
    refused, as the limit says (its spare threads stay for work callers abandon)."""
    a = Admission(workers=20, max_calls=16, max_streams=4)
    for k in range(16):
        a.enter_call("Measure", alive, f"ipv4:10.0.0.{k}:5000")
    with pytest.raises(Exhausted, match="max_concurrent_rpcs"):
        a.enter_call("Measure", alive, "ipv4:10.0.0.99:5000")
    assert a.running() == 16


def test_a_burst_on_one_connection_leaves_the_spare_threads_to_other_connections():
    """One connection holds more than half of the limit: its next call is refused, a call on a
    connection with none in flight takes a spare thread past the limit (workers - 1 - max_calls
    of them: one thread stays free), and a second call of such a connection is refused."""
    a = Admission(workers=20, max_calls=16, max_streams=4)
    burst = "ipv4:127.0.0.1:40000"
    for _ in range(9):
        a.enter_call("Measure", alive, burst)
    for k in range(7):
        a.enter_call("Measure", alive, f"ipv4:10.0.0.{k}:5000")
    with pytest.raises(Exhausted):
        a.enter_call("Measure", alive, burst)
    others = [a.enter_call("Measure", alive, f"ipv4:10.0.1.{k}:5000") for k in range(3)]
    assert a.running() == 19
    with pytest.raises(Exhausted):
        a.enter_call("Measure", alive, "ipv4:10.0.2.1:5000")  # no thread spare
    a.leave(others[0])
    with pytest.raises(Exhausted):
        a.enter_call("Measure", alive, "ipv4:10.0.0.1:5000")  # its connection has a call in flight
    a.enter_call("Measure", alive, "ipv4:10.0.2.1:5000")
    assert not a.stalled()
