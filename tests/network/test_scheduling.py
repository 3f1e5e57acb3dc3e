"""The SimPy adapter: exact absolute-time scheduling through SimPy's internals, checked against the installed SimPy."""

from __future__ import annotations

import pytest
import simpy

from etsim.errors import SimulationError
from etsim.network import scheduling
from etsim.network.scheduling import LATE, CountingEnvironment, event_at, schedule_at, succeed_at


def test_the_installed_simpy_is_the_one_the_adapter_was_written_for() -> None:
    scheduling.check_simpy()  # raises if a SimPy release moved the internals


def test_a_changed_simpy_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simpy, "__version__", "5.0.0")
    with pytest.raises(SimulationError, match=r"etsim needs SimPy 4 \(found 5.0.0\)"):
        scheduling.check_simpy()


def test_an_event_fires_at_the_absolute_time_not_at_now_plus_a_delay() -> None:
    env = CountingEnvironment(initial_time=0.44531083722540643)
    when = 247073.9885627613  # now + (when - now) != when in floats: SimPy's own timeout would miss it
    assert env.now + (when - env.now) != when
    fired: list[float] = []
    event = event_at(env, when, LATE, "v")
    event.callbacks.append(lambda e: fired.append(env.now))
    env.run()
    assert fired == [when] and event.value == "v" and env.scheduled == 1


def test_late_events_fire_after_ordinary_events_of_their_instant() -> None:
    env = simpy.Environment()
    order: list[str] = []
    event_at(env, 5.0, LATE, None).callbacks.append(lambda e: order.append("late"))
    env.timeout(5.0).callbacks.append(lambda e: order.append("ordinary"))
    env.run()
    assert order == ["ordinary", "late"]


def test_an_event_made_earlier_succeeds_later_with_one_heap_entry() -> None:
    env = CountingEnvironment()
    event = env.event()
    succeed_at(env, event, 7.0, value=3)
    assert env.scheduled == 1
    env.run()
    assert env.now == 7.0 and event.value == 3
    with pytest.raises(SimulationError, match="already been triggered"):
        succeed_at(env, event, 1.0)


def test_nothing_is_scheduled_in_the_past() -> None:
    env = simpy.Environment(initial_time=10.0)
    with pytest.raises(SimulationError, match="before now"):
        schedule_at(env, env.event(), 9.0)
