"""A network the C++ core reads in place (run_network without the GIL; feed_network while it calls
Python) refuses every change from Python until the pass returns (NetworkInUseError, a RuntimeError),
so that no thread and no callback can free or change what the pass reads.  Items of a replaced
generation of net.layers and standalone Layers/Windows are not part of the network and stay
writable.  The racing cases run in a child process: on code without the guard they crash it
(SIGSEGV) or give a result no undisturbed pass gives."""
from __future__ import annotations

import hashlib
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from aimcemu import _core


def run_child(code: str) -> str:
    """Runs `code` in a fresh interpreter; a crash (signal) or exception fails the test."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"child exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


CONV = 2  # resnet18's layer1.0.conv1


def small_net(seed: int = 1):
    net = _core.zoo.resnet18(seed, 32, 10)
    net.resolve()
    return net


def content_bytes(net) -> bytes:
    parts: list[bytes] = []
    _core.feed_network(net, lambda b: parts.append(bytes(b)))
    return b"".join(parts)


# Every setter Python has on a network and its parts, each writing back the value it reads (so the
# network is unchanged when the write is allowed).
def every_write(net):
    layer = net.layers[CONV]  # a 3x3 conv: every field meaningful
    writes = {}
    for field in ["name", "kind", "input", "window", "out_channels", "weights", "bias", "bias_shift", "out_shift",
                  "relu", "residual_input", "residual_shift", "relu_after_residual", "input_shift", "avg_mult",
                  "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_top", "pad_bottom", "pad_left", "pad_right",
                  "kernel", "stride", "pad"]:
        writes[f"layer.{field}"] = lambda field=field: setattr(layer, field, getattr(layer, field))
    window = layer.window  # refers to the layer's window in place
    for field in ["kernel_h", "kernel_w", "stride_h", "stride_w", "pad_top", "pad_bottom", "pad_left", "pad_right"]:
        writes[f"window.{field}"] = lambda field=field: setattr(window, field, getattr(window, field))
    for shape_name, shape in [("input_shape", net.input_shape), ("out_shape", layer.out_shape)]:
        for field in "hwc":
            writes[f"{shape_name}.{field}"] = lambda shape=shape, field=field: setattr(shape, field, getattr(shape, field))
    for field in ["name", "input_shape", "input_frac_bits", "output_layer", "class_names", "layers"]:
        writes[f"net.{field}"] = lambda field=field: setattr(net, field, getattr(net, field))
    writes["net.resolve()"] = lambda: net.resolve()
    return writes


def test_every_write_is_refused_while_feed_network_reads_and_works_after():
    net = small_net()
    before = content_bytes(net)
    writes = every_write(net)
    refused: dict[str, str] = {}

    def update(_):
        if refused:
            return
        assert _core._passes_reading(net) == 1
        for what, write in writes.items():
            with pytest.raises(_core.NetworkInUseError) as info:
                write()
            refused[what] = str(info.value)

    _core.feed_network(net, update)
    assert set(refused) == set(writes)
    assert all(net.name in message and "a pass" in message for message in refused.values())
    assert "layers/" + net.layers[CONV].name + "/weights" in refused["layer.weights"]
    assert issubclass(_core.NetworkInUseError, RuntimeError)
    assert _core._passes_reading(net) == 0
    for write in writes.values():  # every setter works again
        write()
    assert content_bytes(net) == before


def test_replaced_generations_and_standalone_parts_stay_writable_during_a_pass():
    net = small_net()
    replaced = net.layers
    net.layers = small_net().layers  # the items in `replaced` now refer to a replaced generation
    standalone_layer, standalone_window, standalone_shape = _core.Layer(), _core.Window(), _core.Shape3(1, 2, 3)
    done = []

    def update(_):
        if done:
            return
        replaced[CONV].name = "old generation"
        replaced[CONV].weights = np.zeros_like(replaced[CONV].weights)
        replaced[CONV].window.kernel_h = 5
        replaced[CONV].kernel_w = 5
        standalone_layer.relu = True
        standalone_window.pad_top = 2
        standalone_shape.h = 7
        with pytest.raises(_core.NetworkInUseError):
            net.layers[CONV].name = "current generation"
        done.append(True)

    _core.feed_network(net, update)
    assert done
    assert replaced[CONV].name == "old generation" and replaced[CONV].window.kernel_h == 5
    assert replaced[CONV].kernel_w == 5 and not replaced[CONV].weights.any()
    assert net.layers[CONV].name != "current generation" and net.layers[CONV].weights.any()
    assert standalone_layer.relu and standalone_window.pad_top == 2 and standalone_shape.h == 7


def test_a_kept_memoryview_raises_instead_of_reading_freed_memory():
    net = small_net()
    views, readonly = [], []

    def update(data):
        views.append(data)
        if isinstance(data, memoryview):
            readonly.append(data.readonly)

    _core.feed_network(net, update)
    operands = [v for v in views if isinstance(v, memoryview)]
    assert operands and len(readonly) == len(operands) and all(readonly)
    net.layers[CONV].weights = np.zeros_like(net.layers[CONV].weights)  # frees the buffer one view pointed into
    junk = [bytearray(b"\xab" * 4096) for _ in range(2000)]
    for view in operands:
        with pytest.raises(ValueError):
            bytes(view)
    del junk


def test_an_array_made_from_a_view_keeps_the_network_unchangeable_while_it_lives():
    """np.frombuffer shares the view's buffer (not an export of the view): the view is released,
    and the array keeps the operand's exporter, and with it the guard, alive."""
    net = small_net()
    arrays = []

    def update(data):
        if isinstance(data, memoryview) and not arrays:
            arrays.append(np.frombuffer(data, dtype=np.int8))

    _core.feed_network(net, update)
    first_operand = net.layers[0].weights.copy()
    np.testing.assert_array_equal(arrays[0], first_operand)
    assert _core._passes_reading(net) == 1
    with pytest.raises(_core.NetworkInUseError):
        net.layers[0].weights = np.zeros_like(first_operand)  # would free what arrays[0] reads
    arrays.clear()
    assert _core._passes_reading(net) == 0
    net.layers[0].weights = np.zeros_like(first_operand)
    assert not net.layers[0].weights.any()


def test_an_export_of_the_view_itself_raises_buffer_error_and_keeps_the_network_unchangeable():
    net = small_net()
    exports = []

    def update(data):
        if isinstance(data, memoryview) and not exports:
            exports.append(struct.iter_unpack("b", data))  # holds a buffer of the view itself

    with pytest.raises(BufferError):  # release() cannot end a view that is exported further
        _core.feed_network(net, update)
    first_operand = net.layers[0].weights.copy()
    with pytest.raises(_core.NetworkInUseError):
        net.layers[0].weights = np.zeros_like(first_operand)
    assert [v for (v,) in exports[0]] == first_operand.tolist()
    exports.clear()
    assert _core._passes_reading(net) == 0
    net.layers[0].weights = np.zeros_like(first_operand)


def test_the_content_bytes_are_unchanged_by_the_views():
    """The digest is over the same bytes as before: structure, then each operand in layer order."""
    net = small_net()
    expected = hashlib.sha256(content_bytes(net)).digest()
    digest = hashlib.sha256()
    _core.feed_network(net, digest.update)
    assert digest.digest() == expected
    assert content_bytes(net)[-sum(l.weights.size + l.bias.size for l in net.layers):] == b"".join(
        l.weights.tobytes() + l.bias.tobytes() for l in net.layers)


def test_a_callback_that_raises_leaves_the_network_writable():
    net = small_net()

    def update(_):
        raise KeyError("callback failed")

    with pytest.raises(KeyError):
        _core.feed_network(net, update)
    assert _core._passes_reading(net) == 0
    net.layers[0].relu = True


def test_feed_network_refuses_a_callback_replacing_the_layers_it_walks():
    """Review finding: the callback's net.layers = [] freed the vector feed_network's loop walked."""
    out = run_child("""
        from aimcemu import _core
        net = _core.zoo.resnet18(1, 32, 10); net.resolve()
        calls, refused = 0, 0
        def update(b):
            global calls, refused
            calls += 1
            try:
                net.layers = []
            except _core.NetworkInUseError:
                refused += 1
            [bytearray(b"\\xcd" * 4096) for _ in range(200)]
        _core.feed_network(net, update)
        print(calls, refused, len(net.layers))
    """)
    calls, refused, layers = map(int, out.split())
    assert calls == refused and calls > 23 and layers == 23


def test_a_weights_key_whose_index_replaces_the_layers_is_refused():
    """Review finding: DictWeights sized its table for the old layer count, then a key's __index__
    replaced the layers (SIGSEGV)."""
    out = run_child("""
        import numpy as np
        from aimcemu import _core
        net = _core.zoo.resnet18(1, 32, 10); net.resolve()
        big = _core.zoo.resnet50(False, 2, 32, 10); big.resolve()
        refusals = []
        class Key:
            def __index__(self):
                try:
                    net.layers = big.layers
                except _core.NetworkInUseError as error:
                    refusals.append(str(error))
                return 2
        images = np.zeros((2, 32, 32, 3), np.int8)
        w2 = net.layers[2].weights.copy()
        out = _core.run_network(net, images, threads=1, weights={Key(): w2}, keep=[-1])
        plain = _core.run_network(net, images, threads=1, keep=[-1])
        print(len(refusals), len(net.layers), int(np.array_equal(out[-1], plain[-1])), _core._passes_reading(net))
    """)
    assert out.split() == ["1", "23", "1", "0"]


def test_what_a_weights_key_raises_reaches_the_caller():
    net = small_net()

    class Key:
        def __index__(self):
            net.layers = []  # refused: the pass has begun

    with pytest.raises(_core.NetworkInUseError, match="cannot change layers"):
        _core.run_network(net, np.zeros((1, 32, 32, 3), np.int8), weights={Key(): net.layers[CONV].weights.copy()})
    with pytest.raises(TypeError):
        _core.run_network(net, np.zeros((1, 32, 32, 3), np.int8), weights={"conv": net.layers[CONV].weights.copy()})
    assert len(net.layers) == 23 and _core._passes_reading(net) == 0


def test_a_keep_iterable_that_replaces_the_layers_is_refused():
    out = run_child("""
        import numpy as np
        from aimcemu import _core
        net = _core.zoo.resnet18(1, 32, 10); net.resolve()
        big = _core.zoo.resnet50(False, 2, 32, 10); big.resolve()
        refused = []
        def keep():
            yield -1
            try:
                net.layers = big.layers
            except _core.NetworkInUseError:
                refused.append(True)
        out = _core.run_network(net, np.zeros((2, 32, 32, 3), np.int8), threads=1, keep=keep())
        print(len(refused), len(out), len(net.layers))
    """)
    assert out.split() == ["1", "23", "23"]


def test_passes_nest_and_the_guard_falls_with_the_last():
    net = small_net()
    seen = []

    class Key:
        def __index__(self):
            _core.feed_network(net, lambda _: seen.append(_core._passes_reading(net)))
            return CONV

    _core.run_network(net, np.zeros((1, 32, 32, 3), np.int8), threads=1,
                      weights={Key(): net.layers[CONV].weights.copy()}, keep=[-1])
    assert seen[0] == 2 and set(seen[1:]) == {3}  # each operand's view holds a read of its own
    assert _core._passes_reading(net) == 0
    with pytest.raises(_core.FormatError):  # a failing pass lowers the guard too
        _core.run_network(net, np.zeros((1, 31, 32, 3), np.int8))
    assert _core._passes_reading(net) == 0
    net.name = "writable again"


RACE_PRELUDE = """
    import threading
    import numpy as np
    from aimcemu import _core
    images = np.random.default_rng(0).integers(-128, 128, size=(16, 32, 32, 3), dtype=np.int8)
    def result(n):
        return _core.run_network(n, images, threads=1, keep=[-1])[-1]
    # Whether one pass's result is one of `expected`.  (The result is taken once: a lambda running a
    # pass per candidate failed when the other thread changed the network between two sound passes.)
    def one_of(r, expected):
        return any(np.array_equal(r, e) for e in expected)
    counts = {"refused": 0, "changed": 0}
    stop = threading.Event()
    def keep_changing(change):
        k = 0
        while not stop.is_set():
            try:
                change(k)
                counts["changed"] += 1
            except _core.NetworkInUseError:
                counts["refused"] += 1
            k += 1
    # Runs undisturbed() (True when a pass gave one of the expected results) `passes` times while
    # another thread keeps calling change(k); prints the count undisturbed, the passes and whether
    # a change was refused.
    def race(change, undisturbed, passes=12):
        thread = threading.Thread(target=keep_changing, args=(change,))
        thread.start()
        try:
            results = [undisturbed() for _ in range(passes)]
        finally:
            stop.set(); thread.join()
        print(sum(results), len(results), int(counts["refused"] > 0))
"""


def test_a_thread_replacing_the_layers_during_run_network_is_refused_and_every_pass_is_undisturbed():
    """Review finding: another thread's net.layers = ... freed the layers a pass read (garbage
    FormatErrors, then SIGSEGV).  Every pass now gives exactly one of the two networks' results."""
    out = run_child(RACE_PRELUDE + """
    a = _core.zoo.resnet18(1, 32, 10); a.resolve()
    b = _core.zoo.resnet50(False, 2, 32, 10); b.resolve()
    net = _core.zoo.resnet18(1, 32, 10); net.resolve()
    expected = [result(a), result(b)]
    race(lambda k: setattr(net, "layers", (b if k % 2 else a).layers),
         lambda: one_of(result(net), expected))
    """)
    assert out.split() == ["12", "12", "1"]


def test_a_thread_replacing_weights_during_run_network_is_refused_and_every_pass_is_undisturbed():
    """Review finding: another thread's net.layers[k].weights = ... silently gave wrong results."""
    out = run_child(RACE_PRELUDE + """
    images = np.random.default_rng(0).integers(-128, 128, size=(64, 32, 32, 3), dtype=np.int8)  # passes long enough to be interrupted
    net = _core.zoo.resnet18(1, 32, 10); net.resolve()
    big = max(range(len(net.layers)), key=lambda i: net.layers[i].weights.size)
    versions = [np.zeros(net.layers[big].weights.size, np.int8), np.ones(net.layers[big].weights.size, np.int8)]
    expected = []
    for v in versions:
        net.layers[big].weights = v
        expected.append(result(net))
    def flip(k):
        net.layers[big].weights = versions[k % 2]
    race(flip, lambda: one_of(result(net), expected))
    """)
    assert out.split() == ["12", "12", "1"]


def test_a_thread_replacing_weights_while_content_digest_hashes_is_refused():
    """Review finding: hashlib hashes without the GIL; another thread's weights change freed the
    buffer it hashed.  Every digest is now one of the two versions'."""
    out = run_child(RACE_PRELUDE + """
    from aimcemu.reference import content_digest
    net = _core.zoo.resnet18(1, 32, 10); net.resolve()
    big = max(range(len(net.layers)), key=lambda i: net.layers[i].weights.size)
    versions = [np.zeros(net.layers[big].weights.size, np.int8), np.ones(net.layers[big].weights.size, np.int8)]
    expected = []
    for v in versions:
        net.layers[big].weights = v
        expected.append(content_digest(net, images))
    def flip(k):
        net.layers[big].weights = versions[k % 2]
    race(flip, lambda: content_digest(net, images) in expected, passes=200)
    """)
    assert out.split() == ["200", "200", "1"]


class WatchedLayers:
    """A sequence of layers that records which items were read (reading one runs Python)."""

    def __init__(self, layers, on_read=None):
        self.layers, self.reads, self.on_read = layers, [], on_read

    def __len__(self):
        return len(self.layers)

    def __getitem__(self, k):
        if not 0 <= k < len(self.layers):
            raise IndexError(k)
        self.reads.append(k)
        if self.on_read is not None:
            self.on_read(k)
        return self.layers[k]


def test_assigning_layers_during_a_pass_is_refused_before_the_list_is_read():
    """Review finding: net.layers = [...] during a pass copied every layer of the list (and ran its
    __getitem__) before the guard refused the assignment."""
    net = small_net()
    donor = small_net(2).layers
    watched = WatchedLayers(donor)
    refusals = []

    def update(_):
        if refusals:
            return
        with pytest.raises(_core.NetworkInUseError) as info:
            net.layers = watched
        refusals.append(str(info.value))
        with pytest.raises(_core.NetworkInUseError):  # refused before its type is even looked at
            net.layers = [object()]

    _core.feed_network(net, update)
    assert refusals and "cannot change layers" in refusals[0]
    assert watched.reads == []
    with pytest.raises(TypeError, match="Network.layers: expected a sequence of aimcemu._core.Layer"):
        net.layers = [object()]
    with pytest.raises(TypeError, match="Network.layers"):
        net.layers = 5
    net.layers = watched  # no pass: read and taken
    assert sorted(set(watched.reads)) == list(range(len(donor)))
    assert [l.name for l in net.layers] == [l.name for l in donor]
    np.testing.assert_array_equal(net.layers[CONV].weights, donor[CONV].weights)


def test_a_pass_started_while_the_list_is_read_refuses_the_assignment():
    """Reading the list runs Python, which may start a pass on the network from another thread:
    the guard is checked again after the list is read, before the layers are replaced.  Here the
    pass (feed_network, in another thread) starts at the first item read and lasts until the
    assignment has returned; replacing the layers under it would free the vector it walks."""
    out = run_child("""
        import threading
        from aimcemu import _core
        net = _core.zoo.resnet18(1, 32, 10); net.resolve()
        big = _core.zoo.resnet50(False, 2, 32, 10); big.resolve()
        expected = []
        _core.feed_network(net, lambda b: expected.append(bytes(b)))
        started, assigned, fed = threading.Event(), threading.Event(), []
        def update(b):
            fed.append(bytes(b))
            started.set()
            assigned.wait()
        feeding = threading.Thread(target=lambda: _core.feed_network(net, update))
        class StartsAPass:
            def __len__(self):
                return len(big.layers)
            def __getitem__(self, k):
                if k >= len(big.layers):
                    raise IndexError(k)
                if not feeding.is_alive() and not started.is_set():
                    feeding.start()
                    started.wait()
                return big.layers[k]
        refused = 0
        try:
            net.layers = StartsAPass()
        except _core.NetworkInUseError:
            refused = 1
        assigned.set()
        feeding.join()
        print(refused, len(net.layers), int(fed == expected))
    """)
    assert out.split() == ["1", "23", "1"]
