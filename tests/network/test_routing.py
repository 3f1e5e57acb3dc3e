import pytest

from etsim.errors import RegistryError, SimulationError
from etsim.network import (
    ROUTERS,
    Dim,
    DimensionOrderRouter,
    Router,
    ShortestPathRouter,
    fully_connected,
    hypercube,
    mesh,
    product,
    ring,
    switch,
    torus,
    uni_ring,
    with_failures,
)
from etsim.registry import allowing_plugins

B, L = 50.0, 500.0


def nodes(router, src, dst):
    route = router.lookup(src, dst)
    links = router.topology.links
    return [src] + [links[link][1] for link in route]


def test_ring_shorter_direction_ties_go_forward():
    r = DimensionOrderRouter(ring(8, B, L))
    assert nodes(r, 0, 3) == [0, 1, 2, 3]
    assert nodes(r, 0, 6) == [0, 7, 6]
    assert nodes(r, 0, 4) == [0, 1, 2, 3, 4]  # tie: +1 direction
    assert nodes(r, 5, 1) == [5, 6, 7, 0, 1]  # tie again: +1
    assert r.lookup(2, 2) == []


def test_uni_ring_goes_forward():
    assert nodes(DimensionOrderRouter(uni_ring(8, B, L)), 3, 1) == [3, 4, 5, 6, 7, 0, 1]


def test_switch_and_fully_connected():
    assert nodes(DimensionOrderRouter(switch(4, B, L)), 1, 3) == [1, "s0", 3]
    assert nodes(DimensionOrderRouter(fully_connected(4, B, L)), 1, 3) == [1, 3]


def test_mesh_and_torus_dimension_order():
    # 4x4, rank = x + 4y: from (0,0) to (3,2): x first, then y
    assert nodes(DimensionOrderRouter(mesh([4, 4], B, L)), 0, 11) == [0, 1, 2, 3, 7, 11]
    # torus: wrap-around in x (3 -> 0 is one hop back), then y
    assert nodes(DimensionOrderRouter(torus([4, 4], B, L)), 0, 11) == [0, 3, 7, 11]


def test_hypercube_lowest_bit_first():
    assert nodes(DimensionOrderRouter(hypercube(8, B, L)), 0, 7) == [0, 1, 3, 7]


def test_product_routes_dim0_then_dim1():
    t = product([Dim("ring", 4, B, L), Dim("switch", 8, B, L)])
    r = DimensionOrderRouter(t)
    # 1 = (1, 0) -> 30 = (2, 7): ring 1 -> 2, then switch of group base 2
    assert nodes(r, 1, 30) == [1, 2, t.dim_switch(1, 2), 30]


def test_routes_are_cached():
    r = DimensionOrderRouter(ring(8, B, L))
    assert r.lookup(0, 3) is r.lookup(0, 3)


def test_failed_link_forces_detour():
    t = with_failures(ring(8, B, L), links=[(0, 1)])
    assert nodes(DimensionOrderRouter(t), 0, 1) == [0, 7, 6, 5, 4, 3, 2, 1]
    assert nodes(DimensionOrderRouter(t), 0, 2) == [0, 7, 6, 5, 4, 3, 2]
    assert nodes(DimensionOrderRouter(t), 2, 4) == [2, 3, 4]  # unaffected routes keep dimension order


def test_shortest_path_router_is_fewest_hops():
    t = mesh([4, 4], B, L)
    assert len(ShortestPathRouter(t).lookup(0, 15)) == 6


def test_bad_endpoints():
    r = DimensionOrderRouter(with_failures(ring(8, B, L), npus=[3]))
    with pytest.raises(SimulationError, match="destination 8 is not an NPU"):
        r.lookup(0, 8)
    with pytest.raises(SimulationError, match="source 3 has failed"):
        r.lookup(3, 0)


class BrokenRouter(Router):
    def route(self, src, dst):
        return [0]


class LongWayRouter(Router):
    """Always goes the +1 way round a ring (a custom router for tests)."""

    def route(self, src, dst):
        n = self.topology.npus
        path = [src]
        while path[-1] != dst:
            path.append((path[-1] + 1) % n)
        return self.nodes_to_links(path)


def test_custom_router_is_validated_and_pluggable():
    with pytest.raises(SimulationError, match="broken route"):
        BrokenRouter(ring(8, B, L)).lookup(3, 4)
    with pytest.raises(RegistryError, match="is a plug-in: importing it runs its code"):
        ROUTERS.get(f"{__name__}:LongWayRouter")  # not without the user's say
    with allowing_plugins():
        cls = ROUTERS.get(f"{__name__}:LongWayRouter")
    assert nodes(cls(ring(8, B, L)), 0, 6) == [0, 1, 2, 3, 4, 5, 6]
    with pytest.raises(RegistryError, match="available: default, shortest"):
        ROUTERS.get("zigzag")
