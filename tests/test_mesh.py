"""The device mesh: axes, coordinates and the groups strategies take from it."""

from __future__ import annotations

import pytest

from simdist.errors import SimdistError
from simdist.hardware.mesh import DEFAULT_ORDER, Mesh


def test_two_axes_row_major():
    mesh = Mesh(range(8), [("data", 2), ("tensor", 4)])
    assert mesh.shape == {"data": 2, "tensor": 4}
    assert mesh.groups("tensor") == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert mesh.groups("data") == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert mesh.coordinate(6) == {"data": 1, "tensor": 2}
    assert mesh.at(data=1, tensor=2) == 6
    assert mesh.group(6, "data") == (2, 6)
    assert mesh.group(6, "tensor") == (4, 5, 6, 7)


def test_three_axes_default_order_keeps_tensor_inside_a_host():
    # 4 hosts x 4 devices: host h holds devices 4h..4h+3.
    mesh = Mesh.of(range(16), {"tensor": 2, "data": 2, "pipeline": 4})
    assert mesh.names == DEFAULT_ORDER == ("data", "pipeline", "tensor")
    assert all(g[0] // 4 == g[-1] // 4 for g in mesh.groups("tensor"))  # one host each
    assert mesh.groups("tensor")[:3] == [(0, 1), (2, 3), (4, 5)]
    assert mesh.groups("pipeline") == [(0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)]
    assert mesh.groups("data")[:3] == [(0, 8), (1, 9), (2, 10)]
    assert mesh.coordinate(13) == {"data": 1, "pipeline": 2, "tensor": 1}
    assert mesh.at(data=1, pipeline=2, tensor=1) == 13


def test_groups_inside_a_host():
    # 2 hosts x 4 devices.
    def host(d: int) -> str:
        return f"worker{d // 4}"

    mesh = Mesh.of(range(8), {"data": 2, "tensor": 4})
    assert mesh.inside("tensor", host) and not mesh.inside("data", host)
    wide = Mesh.of(range(8), {"data": 1, "tensor": 8})
    assert not wide.inside("tensor", host)  # 8-way tensor groups straddle the two hosts
    assert Mesh.of(range(8), {"data": 4, "tensor": 2}).inside("tensor", host)


def test_every_device_has_the_coordinate_it_is_found_at():
    mesh = Mesh(list("abcdefghijkl"), [("data", 3), ("pipeline", 2), ("tensor", 2)])
    for device in mesh.devices:
        assert mesh.at(**mesh.coordinate(device)) == device
    # Each axis's groups partition the devices, and their sizes are the axis's.
    for axis in mesh.names:
        groups = mesh.groups(axis)
        assert sorted(d for g in groups for d in g) == sorted(mesh.devices)
        assert {len(g) for g in groups} == {mesh.size(axis)}
        assert len(groups) == len(mesh) // mesh.size(axis)


def test_pipeline_grid_is_replica_outer_stage_inner():
    # The pipeline strategy's copy r, stage s runs on device r·S + s.
    R, S = 3, 4
    mesh = Mesh.of(range(20), {"data": R, "pipeline": S})
    assert len(mesh) == 12  # the first R·S devices
    assert mesh.groups("pipeline") == [tuple(range(r * S, (r + 1) * S)) for r in range(R)]
    assert mesh.groups("data") == [tuple(r * S + s for r in range(R)) for s in range(S)]


def test_an_axis_the_mesh_lacks_has_groups_of_one():
    mesh = Mesh(range(3), [("data", 3)])
    assert mesh.size("tensor") == 1
    assert mesh.groups("tensor") == [(0,), (1,), (2,)]
    assert mesh.group(1, "tensor") == (1,)
    assert mesh.groups("data") == [(0, 1, 2)]


def test_custom_order():
    mesh = Mesh.of(range(4), {"data": 2, "tensor": 2}, order=("tensor", "data"))
    assert mesh.groups("data") == [(0, 1), (2, 3)]
    assert mesh.groups("tensor") == [(0, 2), (1, 3)]


@pytest.mark.parametrize(
    ("devices", "axes", "message"),
    [
        (range(4), [("data", 3)], "holds 3 devices; got 4"),
        (range(2), [("data", 2), ("data", 1)], "distinct names"),
        (range(0), [("data", 0)], "at least 1 device"),
        ([0, 0], [("data", 2)], "each device once"),
    ],
)
def test_bad_meshes(devices, axes, message):
    with pytest.raises(SimdistError, match=message):
        Mesh(list(devices), axes)


def test_bad_lookups():
    mesh = Mesh.of(range(4), {"data": 2, "tensor": 2})
    with pytest.raises(SimdistError, match="needs 8 devices; got 4"):
        Mesh.of(range(4), {"data": 4, "tensor": 2})
    with pytest.raises(SimdistError, match="not in the order"):
        Mesh.of(range(4), {"expert": 4})
    with pytest.raises(SimdistError, match="not in this mesh"):
        mesh.coordinate(9)
    with pytest.raises(SimdistError, match=r"runs 0\.\.1"):
        mesh.at(data=2, tensor=0)
    with pytest.raises(SimdistError, match="names"):
        mesh.at(data=0)


def test_a_mesh_of_jax_devices_is_jaxs_mesh_in_the_same_layout():
    import jax

    devices = jax.devices()[:4]
    if len(devices) < 4:
        pytest.skip("needs 4 emulated devices")
    mesh = Mesh.of(devices, {"data": 2, "tensor": 2})
    jax_mesh = mesh.to_jax()
    assert jax_mesh.axis_names == ("data", "tensor")
    assert dict(jax_mesh.shape) == {"data": 2, "tensor": 2}
    assert [list(row) for row in jax_mesh.devices] == [devices[:2], devices[2:]]
