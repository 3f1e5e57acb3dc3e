"""Deliveries due at the same instant share one SimPy event without changing any time or order."""

from __future__ import annotations

import pytest
import simpy

from etsim.network import build_model, fully_connected
from etsim.network.model import CountingEnvironment


@pytest.mark.parametrize("model", ["analytical", "link"])
def test_same_instant_deliveries_keep_order_and_later_ones_get_new_events(model: str) -> None:
    env = CountingEnvironment()  # sharing needs the count (a plain Environment shares nothing)
    net = build_model(env, fully_connected(4, 10.0, 100.0), model)
    log: list[tuple[str, float]] = []

    def record(name: str):  # type: ignore[no-untyped-def]
        return lambda _e: log.append((name, env.now))

    a = net.transfer(0, 1, 1000)
    b = net.transfer(2, 3, 1000)
    assert a is b  # the two deliveries due at 200 share one event
    later: list[simpy.Event] = []
    a.callbacks.append(record("a"))
    b.callbacks.append(record("b"))

    def chain(_e: simpy.Event) -> None:
        # At the shared instant: a zero-time local delivery and a new message due later.
        local = net.transfer(1, 1, 0)
        local.callbacks.append(record("local"))
        c = net.transfer(1, 2, 1000)
        c.callbacks.append(record("c"))
        later.extend([local, c])

    a.callbacks.append(chain)
    env.run()
    assert log == [("a", 200.0), ("b", 200.0), ("local", 200.0), ("c", 400.0)], model
    assert all(e is not a for e in later)  # the shared event had fired: new deliveries get new events


@pytest.mark.parametrize("model", ["analytical", "link"])
def test_an_event_scheduled_in_between_keeps_its_place(model: str) -> None:
    """Message A due at T, then another event due at T, then message B due at T: B must fire after it."""
    env = CountingEnvironment()
    net = build_model(env, fully_connected(4, 10.0, 100.0), model)
    log: list[str] = []
    net.transfer(0, 1, 1000).callbacks.append(lambda _e: log.append("a"))  # due at 200
    env.timeout(200).callbacks.append(lambda _e: log.append("other"))
    net.transfer(2, 3, 1000).callbacks.append(lambda _e: log.append("b"))  # also due at 200
    env.run()
    assert log == ["a", "other", "b"]


@pytest.mark.parametrize("model", ["analytical", "link"])
def test_nothing_scheduled_in_between_shares_one_event(model: str) -> None:
    env = CountingEnvironment()
    net = build_model(env, fully_connected(4, 10.0, 100.0), model)
    first, second = net.transfer(0, 1, 1000), net.transfer(2, 3, 1000)
    assert first is second
    plain = simpy.Environment()  # without the count nothing is shared
    net = build_model(plain, fully_connected(4, 10.0, 100.0), model)
    assert net.transfer(0, 1, 1000) is not net.transfer(2, 3, 1000)
