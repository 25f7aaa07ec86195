"""simdist.sim: the helpers that use SimPy's internals behave as the public calls they replace."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import simpy

from simdist.errors import SimdistError
from simdist.sim import (
    TimeoutBatch,
    call_urgent,
    check_simpy_version,
    next_event_id,
    queued,
    schedule_keyed,
    settle,
    triggered,
)

#: SimPy's private state (simpy/core.py, simpy/events.py) that simdist may rely on.
SIMPY_PRIVATE = {"_queue", "_eid", "_now", "_ok", "_value", "_defused", "_target", "_generator"}
PACKAGE = Path(__file__).resolve().parents[1] / "simdist"


def simpy_private_uses(root: Path) -> list[str]:
    """``module:line .name`` for each attribute of :data:`SIMPY_PRIVATE` read or set on
    anything but ``self`` in the package at ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in SIMPY_PRIVATE
                and not (isinstance(node.value, ast.Name) and node.value.id == "self")
            ):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} .{node.attr}")
    return found


def test_only_simdist_sim_touches_simpys_internals() -> None:
    assert all(use.startswith("simdist/sim.py:") for use in simpy_private_uses(PACKAGE))
    assert simpy_private_uses(PACKAGE)  # the walk does see the helpers' own uses


@pytest.fixture
def env() -> simpy.Environment:
    return simpy.Environment()


@pytest.mark.parametrize("version", ["4.1.0", "4.1.1", "4.1.2", simpy.__version__])
def test_supported_simpy_versions_pass(version: str) -> None:
    check_simpy_version(version)


@pytest.mark.parametrize("version", ["4.0.2", "4.2.0", "5.0", "3.0.13", "dev", "4"])
def test_other_simpy_versions_are_one_clear_error(version: str) -> None:
    with pytest.raises(SimdistError) as error:
        check_simpy_version(version)
    assert "simpy>=4.1,<4.2" in str(error.value)
    assert f"simpy {version} is installed" in str(error.value)


def test_settle_is_succeed_and_a_step_that_calls_nothing(env: simpy.Environment) -> None:
    event = env.event()
    settle(event, 7)
    assert event.triggered and event.processed and event.ok and event.value == 7
    assert queued(env) == 0  # nothing scheduled: no step to process


def test_call_urgent_runs_before_normal_events_due_now(env: simpy.Environment) -> None:
    log: list[tuple[str, float]] = []
    env.timeout(0).callbacks.append(lambda _: log.append(("normal", env.now)))
    call_urgent(env, lambda _: log.append(("urgent", env.now)))
    env.run()
    assert log == [("urgent", 0), ("normal", 0)]


def test_schedule_keyed_orders_equal_times_by_key(env: simpy.Environment) -> None:
    log: list[str] = []
    for name, key in (("b", 2), ("a", 1), ("c", 3)):
        schedule_keyed(env, triggered(env, lambda _, name=name: log.append(name)), 1.5, key)
    env.run()
    assert log == ["a", "b", "c"] and env.now == 1.5


def test_next_event_id_counts_on_from_the_environment(env: simpy.Environment) -> None:
    env.timeout(1)  # id 0
    assert next_event_id(env) == 1
    env.timeout(1)  # id 2
    assert next_event_id(env) == 3


def _log_calls(env: simpy.Environment, log: list[tuple[str, float]], name: str):
    return lambda _: log.append((name, env.now))


def test_a_batch_runs_its_calls_where_their_timeouts_would_have_run() -> None:
    def run(batched: bool) -> list[tuple[str, float]]:
        env = simpy.Environment()
        log: list[tuple[str, float]] = []
        env.timeout(2.0).callbacks.append(_log_calls(env, log, "before"))
        if batched:
            batch = TimeoutBatch(env, 2.0, [_log_calls(env, log, "x")])
            assert batch.join(2.0, _log_calls(env, log, "y"))
            assert queued(env) == 2  # one event for both calls
        else:
            for name in ("x", "y"):
                env.timeout(2.0).callbacks.append(_log_calls(env, log, name))
        env.timeout(2.0).callbacks.append(_log_calls(env, log, "after"))
        env.run()
        return log

    expected = [("before", 2.0), ("x", 2.0), ("y", 2.0), ("after", 2.0)]
    assert run(batched=True) == run(batched=False) == expected


def test_a_batch_takes_no_call_once_something_was_scheduled_or_for_another_delay(
    env: simpy.Environment,
) -> None:
    batch = TimeoutBatch(env, 1.0, [lambda _: None])
    assert not batch.join(2.0, lambda _: None)
    env.timeout(1.0)
    assert not batch.join(1.0, lambda _: None)
    assert len(batch.calls) == 1


def test_an_urgent_event_a_call_schedules_runs_before_the_next_call(
    env: simpy.Environment,
) -> None:
    log: list[tuple[str, float]] = []

    def starts_a_process(_: object) -> None:
        log.append(("x", env.now))
        call_urgent(env, _log_calls(env, log, "urgent"))

    batch = TimeoutBatch(env, 1.0, [starts_a_process, _log_calls(env, log, "y")])
    env.timeout(1.0).callbacks.append(_log_calls(env, log, "later"))
    assert batch.eid == 0
    env.run()
    assert log == [("x", 1.0), ("urgent", 1.0), ("y", 1.0), ("later", 1.0)]
