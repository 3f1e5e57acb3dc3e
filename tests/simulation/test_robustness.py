"""Random workloads never crash the simulator: a result, or an EtsimError that names the problem."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etsim.chakra import TraceBuilder, Workload
from etsim.errors import EtsimError
from etsim.network import fully_connected
from etsim.simulation import simulate
from etsim.system.config import SystemConfig

NODE = st.tuples(
    st.sampled_from(["comp", "send", "recv", "coll", "mem", "meta", "invalid", "cpu"]),
    st.integers(min_value=-1, max_value=4),  # peer (may be invalid)
    st.integers(min_value=-1, max_value=3),  # tag
    st.integers(min_value=-10, max_value=5000),  # size
    st.integers(min_value=0, max_value=11),  # comm_type (10, 11 invalid)
    st.sampled_from([None, "", "0", "1", "9"]),  # pg_name
    st.lists(st.integers(min_value=0, max_value=40), max_size=3),  # deps (may dangle or be forward)
)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    ranks = draw(st.integers(min_value=1, max_value=4))
    traces = []
    for rank in range(ranks):
        b = TraceBuilder()
        for kind, peer, tag, size, ctype, pg, deps in draw(st.lists(NODE, max_size=8)):
            deps = [d for d in deps if d < len(b.nodes) or draw(st.booleans())]
            if kind == "comp":
                b.comp(duration_micros=abs(size) % 50, deps=deps)
            elif kind == "cpu":
                b.comp(duration_micros=abs(size) % 50, deps=deps, is_cpu_op=True)
            elif kind == "send":
                b.send(dst=peer, size=size, tag=tag, deps=deps)
            elif kind == "recv":
                b.recv(src=peer, size=size, tag=tag, deps=deps)
            elif kind == "coll":
                b.collective(ctype, max(size, 0) if draw(st.booleans()) else size, deps=deps, pg_name=pg)
            elif kind == "mem":
                b.mem(store=bool(size % 2), tensor_size=abs(size), deps=deps)
            elif kind == "meta":
                b.node(1, "meta", deps=deps)
            else:
                b.node(0, "invalid", deps=deps)
        traces.append(b.build(rank=rank))
    return Workload(traces)


@pytest.mark.filterwarnings("ignore::etsim.errors.EtsimWarning")  # warnings are legal outcomes here
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workload=workloads(),
    algo=st.sampled_from(["ring", "direct", "halving_doubling", "tree"]),
    model=st.sampled_from(["analytical", "link"]),
)
def test_random_workloads_give_a_result_or_an_etsim_error(workload: Workload, algo: str, model: str) -> None:
    try:
        result = simulate(
            workload,
            topology=fully_connected(4, 10.0, 100.0),
            model=model,
            system=SystemConfig(algorithms={"default": algo}),
        )
    except EtsimError as exc:
        assert str(exc)
        return
    assert len(result.ranks) == workload.num_ranks
    assert all(r.finish_ns >= 0 for r in result.ranks)


def test_a_process_running_many_simulations_leaves_each_finished_run_to_the_garbage_collector() -> None:
    """A run's engine and its walks form reference cycles: once the run is over, the collector's own passes free
    them (a run that hid its objects from the collector would keep every engine of a sweep alive).

    In a fresh interpreter, where the collector's passes depend only on the runs (inside a long test session they
    depend on everything before).
    """
    import subprocess
    import sys

    code = """
import gc, weakref
from etsim.chakra import Workload
from etsim.network import ring
from etsim.producers import data_parallel_workload
from etsim.report.record import RunRecorder
from etsim.simulation import simulate
engines = []
for _ in range(10):
    workload = Workload(data_parallel_workload(32, layers=10, grad_bytes=1 << 20, fwd_micros=10, bwd_micros=10))
    recorder = RunRecorder()
    simulate(workload, topology=ring(32, 50.0, 500.0), model="link", observer=recorder)
    engines.append(weakref.ref(recorder.engine))
    del recorder
print(gc.isenabled(), sum(1 for engine in engines if engine() is not None))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    enabled, alive = out.stdout.split()
    assert enabled == "True" and int(alive) <= 5, f"{alive} engines of 10 finished runs are still alive"
