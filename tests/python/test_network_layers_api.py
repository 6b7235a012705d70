"""Network.layers from Python: each item refers to the network's layer (changing it changes the
network), and stays valid after the network's layers are replaced (``net.layers = ...``), when it
refers to the replaced layer (as a Python list's former items do): it never points into freed
memory.  The idiom ``layers = net.layers; layers[k].x = ...; net.layers = layers`` keeps working."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from aimcemu import _core


def churn_heap():
    """Reuses freed memory, so that a reference into freed layers reads something else."""
    return [bytearray(b"\xab" * 4096) for _ in range(2000)] + [_core.zoo.resnet18(7, 32, 10) for _ in range(3)]


def test_an_item_refers_to_the_network_layer():
    net = _core.zoo.resnet18(1, 32, 10)
    first = net.layers[0]
    first.name = "renamed"
    net.layers[1].weights = np.zeros_like(net.layers[1].weights)
    assert net.layers[0].name == "renamed"
    assert not net.layers[1].weights.any()


@pytest.mark.parametrize("replacement", ["other network", "same items", "empty"])
def test_items_taken_before_the_layers_are_replaced_keep_the_replaced_layers(replacement):
    net = _core.zoo.resnet18(1, 32, 10)
    names = [l.name for l in net.layers]
    weights = [l.weights.copy() for l in net.layers]
    taken = net.layers
    if replacement == "other network":
        net.layers = _core.zoo.resnet50(2, 32, 10).layers
    elif replacement == "same items":
        taken[2].name = "changed before"
        net.layers = taken
    else:
        net.layers = []
    junk = churn_heap()
    expected_names = list(names)
    if replacement == "same items":
        expected_names[2] = "changed before"
    assert [l.name for l in taken] == expected_names
    for layer, w in zip(taken, weights):
        np.testing.assert_array_equal(layer.weights, w)
    taken[0].name = "after"  # the replaced layer, not the network's
    if replacement == "same items":
        assert net.layers[0].name == names[0] and net.layers[2].name == "changed before"
    del junk


def test_replaced_layers_are_freed_with_their_last_item():
    gc.collect()
    before = _core._layer_storages_alive()
    net = _core.zoo.resnet18(1, 32, 10)
    first, second = net.layers[0], net.layers[1]
    assert _core._layer_storages_alive() == before + 1
    net.layers = _core.zoo.resnet18(2, 32, 10).layers  # first and second keep the replaced layers
    third = net.layers[2]
    assert _core._layer_storages_alive() == before + 2
    del first
    assert _core._layer_storages_alive() == before + 2
    del second
    assert _core._layer_storages_alive() == before + 1
    del third, net
    gc.collect()
    assert _core._layer_storages_alive() == before


def test_items_of_a_network_that_goes_away_keep_it_alive():
    item = _core.zoo.resnet18(1, 32, 10).layers[3]
    churn_heap()
    assert item.name and item.weights.size > 0


def test_init_again_on_a_live_object_is_refused_and_items_taken_before_keep_working():
    """pybind11 ignores a second __init__ on a live object (None, nothing changed), which read as a
    reset that did not happen; it is a TypeError naming the class now."""
    net = _core.zoo.resnet18(1, 32, 10)
    net.resolve()
    items = net.layers
    names = [l.name for l in items]
    window, shape = items[2].window, net.input_shape
    for obj, cls, args in [(net, "Network", ()), (items[2], "Layer", ()), (window, "Window", (5, 5)),
                           (shape, "Shape3", (1, 2, 3)), (_core.Layer(), "Layer", ())]:
        with pytest.raises(TypeError, match=rf"aimcemu\._core\.{cls}\.__init__: the object is initialized already"):
            obj.__init__(*args)
    churn_heap()
    assert [l.name for l in items] == names and [l.name for l in net.layers] == names
    assert window.kernel_h == 3 and shape == _core.Shape3(32, 32, 3)
    items[2].name = "still the network's"
    assert net.layers[2].name == "still the network's"
    # Construction is as before, positional and by keyword, and for Python subclasses.
    assert _core.Window(kernel_h=2).kernel_h == 2 and _core.Shape3(1, 2, 3).c == 3 and net.layers[2].kernel_h == 3

    class Named(_core.Layer):
        def __init__(self, name):
            super().__init__()
            self.name = name

    named = Named("x")
    assert named.name == "x"
    with pytest.raises(TypeError, match=r"\.Layer\.__init__"):
        named.__init__("y")
    assert named.name == "x"
    with pytest.raises(TypeError, match="incompatible"):  # the class's own argument check still runs
        _core.Shape3("a", 2, 3)


@pytest.mark.parametrize("self_argument", [5, object(), "text", None])
def test_init_called_on_an_object_of_another_type_is_refused_not_crashed(self_argument):
    """The second-__init__ guard read any `self` as an instance of the class: Network.__init__(5)
    was a SIGSEGV.  The class's own __init__ now refuses it, as pybind11 did before the guard."""
    with pytest.raises(TypeError):
        _core.Network.__init__(self_argument)
    with pytest.raises(TypeError):
        _core.Shape3.__init__(self_argument, 1, 2, 3)


def test_init_called_on_an_object_of_another_class_of_the_module_names_no_second_init():
    with pytest.raises(TypeError) as error:
        _core.Shape3.__init__(_core.Network(), 1, 2, 3)
    assert "initialized already" not in str(error.value)
