"""The one module that touches SimPy's internals: events scheduled at exact times, shared deliveries.

SimPy's public API schedules an event ``delay`` ns after now (``now + delay``) and triggers it at once
(``succeed``). The fast path needs two things it does not offer: an event that fires at an *absolute* time, to the
last bit of the float the event path would reach, and an event created earlier (the one
:meth:`~etsim.network.NetworkModel.transfer` already returned) that fires later with one heap entry. Both need
SimPy's scheduler internals: an event's ``_ok`` and ``_value``, the environment's ``_queue`` and ``_eid``. They
are used here only, and checked when this module is imported: a SimPy release that changes them makes etsim fail
with a message saying so, not compute something else (``tests/network/test_scheduling.py``).
"""

from __future__ import annotations

from heapq import heappush
from typing import Any

import simpy

from etsim.errors import SimulationError

__all__ = [
    "LATE",
    "CountingEnvironment",
    "SharedDeliveries",
    "check_simpy",
    "event_at",
    "schedule_at",
    "succeed_at",
]


def _trigger(event: simpy.Event, value: Any) -> None:
    """Mark *event* as succeeded with *value*, without scheduling it (what ``succeed`` does before it schedules)."""
    event._ok = True
    event._value = value


def check_simpy() -> None:
    """Raise :class:`SimulationError` if SimPy's scheduler is not the one this module was written against (4.x)."""
    version = getattr(simpy, "__version__", "?")
    env = simpy.Environment()
    event = simpy.Event(env)
    pending = getattr(event, "_value", None) is simpy.events.PENDING
    if pending:
        _trigger(event, 5)  # what the adapter does: the public properties must see it
    found = {
        "Environment._queue": isinstance(getattr(env, "_queue", None), list),
        "Environment._eid": hasattr(getattr(env, "_eid", None), "__next__"),
        "Event._value": pending,
        "Event._ok": pending and event.triggered and event.ok and event.value == 5,
    }
    missing = [name for name, ok in found.items() if not ok]
    if not str(version).startswith("4.") or missing:
        raise SimulationError(
            f"etsim needs SimPy 4 (found {version}): it schedules events at exact times through SimPy's "
            f"internals{', which changed: ' + ', '.join(missing) if missing else ''}; install 'simpy>=4.1,<5'"
        )


check_simpy()


def succeed_at(env: simpy.Environment, event: simpy.Event, delay: float, value: Any = None) -> None:
    """Trigger *event* successfully *delay* ns from now, with one scheduled engine event.

    This is what :class:`simpy.Timeout` does internally, applied to an event created earlier (the one
    :meth:`NetworkModel.transfer` already returned).
    """
    if event.triggered:
        raise SimulationError(f"{event!r} has already been triggered")
    _trigger(event, value)
    env.schedule(event, simpy.events.NORMAL, delay)


#: Priority of events that must fire after every ordinary event due at the same instant.
LATE = 2


def schedule_at(env: simpy.Environment, event: simpy.Event, when: float, priority: int = 1) -> None:
    """Schedule *event* (already triggered) at the absolute time *when*, not ``now + (when - now)``.

    SimPy schedules at ``now + delay``, which can differ from *when* in the last bit; a time computed
    ahead (the fast path) must fire at exactly the float the event path would reach.
    """
    if when < env.now:
        raise SimulationError(f"cannot schedule an event at {when} ns, before now ({env.now} ns)")
    if isinstance(env, CountingEnvironment):
        env.scheduled += 1
    heappush(env._queue, (when, priority, next(env._eid), event))  # type: ignore[attr-defined,misc]


def event_at(env: simpy.Environment, when: float, priority: int, value: Any) -> simpy.Event:
    """A new event holding *value* that fires at the absolute time *when* with *priority* (see :func:`schedule_at`)."""
    event = simpy.Event(env)
    _trigger(event, value)
    schedule_at(env, event, when, priority)
    return event


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it schedules (:attr:`scheduled`).

    Network models use the count to know whether an event due at time T can be shared by another
    delivery due at T without changing the order events fire in (see :class:`SharedDeliveries`).
    """

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.scheduled = 0
        """Events scheduled so far."""

    def schedule(
        self, event: simpy.Event, priority: simpy.events.EventPriority = simpy.events.NORMAL, delay: float = 0
    ) -> None:
        """Schedule *event* as SimPy does, and count it."""
        self.scheduled += 1
        super().schedule(event, priority, delay)


class SharedDeliveries:
    """Deliveries due at the same instant share one SimPy event, when that changes nothing.

    Sharing is exact only if no other event was scheduled after the shared one: otherwise that
    event, due at the same instant, would have fired before a separate delivery event and after the
    shared one. With a :class:`CountingEnvironment` (what :func:`etsim.simulation.simulate` uses)
    this is checked; with a plain ``simpy.Environment`` nothing is shared.
    """

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._due: dict[float, tuple[simpy.Event, int]] = {}
        self._counting = isinstance(env, CountingEnvironment)

    def event(self, delay: float) -> simpy.Event:
        """An event that fires *delay* ns from now, shared with other deliveries where exact."""
        env = self.env
        if not self._counting:
            return simpy.events.Timeout(env, delay)
        when = env.now + delay  # the float SimPy schedules at
        entry = self._due.get(when)
        if entry is not None and entry[1] == env.scheduled:  # type: ignore[attr-defined]
            return entry[0]
        event = simpy.events.Timeout(env, delay)
        event.callbacks.append(self._forget)  # type: ignore[union-attr]
        self._due[when] = (event, env.scheduled)  # type: ignore[attr-defined]
        return event

    def _forget(self, event: simpy.Event) -> None:
        entry = self._due.get(self.env.now)
        if entry is not None and entry[0] is event:
            del self._due[self.env.now]
