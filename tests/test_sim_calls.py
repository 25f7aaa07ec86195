"""simdist.sim's Call, reserve_key and take_next: the events they schedule (or take) run
where SimPy would have run the events they replace."""

from __future__ import annotations

import simpy

from simdist.runtime.ties import random_ties
from simdist.sim import Call, reserve_key, take_next


def _note(env: simpy.Environment, log: list[tuple[str, float]], name: str):
    return lambda _: log.append((name, env.now))


def test_a_call_runs_where_a_timeout_of_its_delay_would_run() -> None:
    def run(calls: bool) -> list[tuple[str, float]]:
        env = simpy.Environment()
        log: list[tuple[str, float]] = []
        env.timeout(1.5).callbacks.append(_note(env, log, "a"))
        if calls:
            Call(env, _note(env, log, "b"), 1.5)
        else:
            env.timeout(1.5).callbacks.append(_note(env, log, "b"))
        env.timeout(1.5).callbacks.append(_note(env, log, "c"))
        env.run()
        return log

    assert run(True) == run(False) == [("a", 1.5), ("b", 1.5), ("c", 1.5)]


def test_a_call_scheduled_again_runs_once_more() -> None:
    env = simpy.Environment()
    log: list[tuple[str, float]] = []
    call = Call(env, _note(env, log, "x"))
    env.run()
    call.again([_note(env, log, "y")])
    env.timeout(0).callbacks.append(_note(env, log, "after"))
    env.run()
    assert log == [("x", 0), ("y", 0), ("after", 0)]


def test_a_call_made_with_a_reserved_key_runs_where_it_was_reserved() -> None:
    env = simpy.Environment()
    log: list[tuple[str, float]] = []
    env.timeout(2.0).callbacks.append(_note(env, log, "before"))
    key = reserve_key(env)
    assert key is not None
    env.timeout(2.0).callbacks.append(_note(env, log, "after"))
    Call(env, _note(env, log, "reserved"), 2.0, key)
    env.run()
    assert log == [("before", 2.0), ("reserved", 2.0), ("after", 2.0)]


def test_no_key_is_reserved_while_ties_are_random() -> None:
    env = simpy.Environment()
    with random_ties(0):
        assert reserve_key(env) is None
    assert reserve_key(env) is not None


def test_take_next_takes_only_the_event_simpy_would_process_next() -> None:
    env = simpy.Environment()
    log: list[tuple[str, float]] = []
    first = Call(env, _note(env, log, "first"), 1.0)
    second = Call(env, _note(env, log, "second"), 1.0)
    assert not take_next(env, second)
    assert take_next(env, first)
    assert first.processed and not second.processed
    env.run()
    assert log == [("second", 1.0)]
