"""The noise-free reference: filled by the PU's pass straight into a ReferenceActivations that the
results writer shares, and reused across runs (aimcemu.reference.ReferenceCache).

Pinned here: the shared reference equals _core.run_network bit for bit and is read-only; a run
with a reused reference writes the same results file as one without (every dataset and
attribute; the config's output path and creation time aside); one changed weight byte, one
changed image pixel or another kept-layer set misses the cache; the cache never holds more than
its bound; a sweep's worker computes the reference once for all its tasks; two threads asking for
the same reference at once compute it once (and the second computes it itself when the first fails)."""
from __future__ import annotations

import json
import os
from collections import OrderedDict, defaultdict

import h5py
import numpy as np
import pytest

import aimcemu
from aimcemu import _core, modelfile
from aimcemu import reference as reference_module
from aimcemu.reference import ReferenceCache, compute_reference, process_cache, reference_key
from conftest import digits_subset

IMAGES = 24
NOISY = dict(mapping="all", noise="pcm_like", t="0,1d", chips=2, rounds=2, seed=7, layers=["stem", "classifier"])


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return digits_subset(tmp_path_factory, IMAGES)


def file_contents(path) -> dict:
    """Every dataset and attribute of a results file by path (dimension-scale references as the
    names they point to); the root config without what names the output and the time it was
    written."""
    contents = {}
    with h5py.File(path, "r") as f:
        def attribute(key, value):
            if key == "DIMENSION_LIST":
                return [[f[ref].name for ref in axis] for axis in value]
            if key == "REFERENCE_LIST":
                return [(f[ref].name, int(dim)) for ref, dim in value]
            if isinstance(value, np.ndarray) and value.dtype == object:
                return [str(v) for v in np.ravel(value)]
            return value

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                contents[name] = obj[()]
            for key, value in obj.attrs.items():
                contents[f"{name}@{key}"] = attribute(key, value)

        visit("/", f)
        f.visititems(visit)
    config = json.loads(contents.pop("/@config"))
    del config["output"], config["created"]
    contents["/@config"] = config
    return contents


def assert_same_contents(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        if isinstance(a[name], (dict, list)):
            assert a[name] == b[name], name
        else:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_the_shared_reference_is_the_pus_output_bit_for_bit_and_read_only(digits):
    _, _, net, images, _ = digits
    layers = [0, 2, len(net.layers) - 1]
    reference = compute_reference(net, images, layers, "fast", 2)
    assert reference.sealed and reference.layers == layers and reference.images == IMAGES
    expected = _core.run_network(net, images, "reference", 1)
    for i in layers:
        view = reference.layer(i, net)
        np.testing.assert_array_equal(view, expected[i])
        assert not view.flags.writeable
        with pytest.raises(ValueError):
            view[0, 0, 0, 0] = 1
    assert reference.bytes == sum(expected[i].size for i in layers)
    with pytest.raises(aimcemu.FormatError, match="not held"):
        reference.layer(1, net)
    with pytest.raises(aimcemu.FormatError, match="already filled"):  # immutable once sealed
        _core.run_network(net, images, "fast", 1, None, [], into=reference)
    with pytest.raises(aimcemu.FormatError, match="images"):
        _core.run_network(net, images[:3], "fast", 1, None, [], into=_core.ReferenceActivations(net, IMAGES, layers))


def test_a_writer_refuses_a_reference_made_for_other_images_or_missing_a_layer(digits, tmp_path):
    _, _, net, images, labels = digits
    writer = _core.ResultsWriter(str(tmp_path / "w.h5"), net, labels, [(0, 0, 0.0)], "{}", "none")
    too_few = compute_reference(net, images[:4], range(len(net.layers)), "fast", 1)
    with pytest.raises(aimcemu.FormatError, match="made for 4 images"):
        writer.share_reference(too_few)
    partial = compute_reference(net, images, [0, len(net.layers) - 1], "fast", 1)
    with pytest.raises(aimcemu.FormatError, match=r"layers/.*/reference.*not in the shared reference"):
        writer.share_reference(partial)  # noisy rounds compare every layer with the reference
    unfilled = _core.ReferenceActivations(net, IMAGES, list(range(len(net.layers))))
    with pytest.raises(aimcemu.FormatError, match="not a sealed"):
        writer.share_reference(unfilled)


@pytest.mark.parametrize("options", [NOISY, dict(layers="all"), dict(mapping={"default": "digital"}, rounds=2)],
                         ids=["all-aimc", "digital", "digital-rounds"])
def test_a_reused_reference_writes_the_same_file(digits, tmp_path, options):
    model, data, _, _, _ = digits
    cache = ReferenceCache()
    alone = aimcemu.run(model, data, tmp_path / "alone.h5", **options)
    first = aimcemu.run(model, data, tmp_path / "first.h5", reuse_reference=cache, **options)
    reused = aimcemu.run(model, data, tmp_path / "reused.h5", reuse_reference=cache, **options)
    assert (cache.computed, cache.hits) == (1, 1)
    expected = file_contents(tmp_path / "alone.h5")
    assert_same_contents(expected, file_contents(tmp_path / "first.h5"))
    assert_same_contents(expected, file_contents(tmp_path / "reused.h5"))
    assert reused.accuracy == alone.accuracy and reused.round_accuracy == alone.round_accuracy


def test_one_changed_weight_byte_image_pixel_or_kept_layer_set_misses_the_cache(digits, tmp_path):
    model, data, net, images, labels = digits
    changed_net = modelfile.load_model(model)
    layers = changed_net.layers
    weights = layers[2].weights
    weights[5] = np.int8(weights[5] ^ 1)
    layers[2].weights = weights
    changed_net.layers = layers
    changed_model = tmp_path / "changed_model.h5"
    modelfile.save_model(changed_net, changed_model)
    changed_images = images.copy()
    changed_images[3, 4, 5, 0] ^= 1
    changed_data = tmp_path / "changed_data.h5"
    modelfile.save_dataset(changed_images, labels, changed_data, source="digits subset",
                           input_frac_bits=modelfile.load_dataset(data, net)["input_frac_bits"])

    every = range(len(net.layers))
    keys = {reference_key(net, images, every), reference_key(changed_net, images, every),
            reference_key(net, changed_images, every), reference_key(net, images, [0, len(net.layers) - 1])}
    assert len(keys) == 4
    assert reference_key(modelfile.load_model(model), images.copy(), every) == reference_key(net, images, every)

    cache = ReferenceCache(max_entries=8)
    runs = [(model, data, "all"), (changed_model, data, "all"), (model, changed_data, "all"), (model, data, "none"),
            (model, data, "all")]
    for k, (m, d, stored) in enumerate(runs):
        aimcemu.run(m, d, tmp_path / f"run{k}.h5", layers=stored, reuse_reference=cache)
        alone = tmp_path / f"alone{k}.h5"
        aimcemu.run(m, d, alone, layers=stored)
        assert_same_contents(file_contents(alone), file_contents(tmp_path / f"run{k}.h5"))
    assert (cache.computed, cache.hits) == (4, 1)  # only the last run matches an earlier one


def test_the_cache_never_holds_more_than_its_bound(digits, monkeypatch):
    _, _, net, images, _ = digits
    output = len(net.layers) - 1
    references = {n: compute_reference(net, images[:n], [output], "fast", 1) for n in (2, 3, 4, 5)}
    by_entries = ReferenceCache(max_entries=2)
    for n, r in references.items():
        by_entries.put(str(n), r)
        assert len(by_entries) <= 2
    assert by_entries.get("2") is None and by_entries.get("5") is references[5]  # least recently used out
    size = references[2].bytes  # 2 images of the output layer
    by_bytes = ReferenceCache(max_entries=10, max_bytes=9 * size // 4)  # 4.5 images
    for n, r in references.items():
        by_bytes.put(str(n), r)
        assert by_bytes.bytes <= by_bytes.max_bytes
    assert by_bytes.get("5") is None  # larger than the whole budget: never kept
    assert by_bytes.get("4") is references[4]
    with pytest.raises(ValueError, match="sealed"):
        by_entries.put("x", _core.ReferenceActivations(net, 2, [output]))
    # A miss makes room before it computes, so the old entry is not held beside the new one.
    one = ReferenceCache(max_entries=1)
    one.get_or_compute(net, images[:2], [output], "fast", 1)
    seen = []
    real = reference_module.compute_reference

    def spy(*args):
        seen.append(len(one))
        return real(*args)

    monkeypatch.setattr(reference_module, "compute_reference", spy)
    one.get_or_compute(net, images[:3], [output], "fast", 1)
    assert seen == [0] and len(one) == 1
    with pytest.raises(ValueError, match="max_entries"):
        ReferenceCache(max_entries=0)
    with pytest.raises(aimcemu.FormatError, match="reuse_reference"):
        aimcemu.run(reuse_reference="yes")


def test_the_process_cache_is_off_by_default_and_on_with_reuse_reference(digits, tmp_path):
    model, data, _, _, _ = digits
    cache = process_cache()
    cache.clear()
    computed = cache.computed
    aimcemu.run(model, data, tmp_path / "a.h5")
    assert len(cache) == 0 and cache.computed == computed
    aimcemu.run(model, data, tmp_path / "b.h5", reuse_reference=True)
    aimcemu.run(model, data, tmp_path / "c.h5", reuse_reference=True)
    assert len(cache) == 1 and cache.computed == computed + 1
    cache.clear()


def test_a_sweep_worker_computes_the_reference_once_for_all_its_tasks(digits, tmp_path):
    _, data, _, _, _ = digits
    cfg = {"output": str(tmp_path / "s"), "data": str(data), "noise": {"model": "pcm_like"}, "mapping": "all",
           "t": [1.0], "chips": 1, "seed": 3, "grid": {"noise.prog_noise_scale": [0.5, 1.0, 2.0]}}
    result = aimcemu.sweep(cfg, workers=1, progress=False)
    assert result.ran == 3
    per_worker = defaultdict(list)
    for summary in result.summaries.values():
        per_worker[summary["pid"]].append(summary["worker_references_computed"])
    assert len(per_worker) == 1
    assert [max(counts) for counts in per_worker.values()] == [1]
    # and each task's file is what a run without reuse writes
    task = next(iter(result.summaries.values()))
    with h5py.File(tmp_path / "s" / task["file"]) as f:
        run_config = json.loads(f.attrs["config"])
    alone = tmp_path / "alone.h5"
    aimcemu.run(run_config["model"], run_config["data"], alone, mapping="all", noise=run_config["noise"],
                t=tuple(run_config["t"]), chips=1, seed=3, layers=run_config["layers"])
    a, b = file_contents(alone), file_contents(tmp_path / "s" / task["file"])
    for config in (a["/@config"], b["/@config"]):
        config.pop("threads"), config.pop("threads_used")  # the sweep's per-task count, the run's all cores
    assert_same_contents(a, b)


def _two_threads_ask_at_once(cache, digits, compute):
    """Runs cache.get_or_compute on two threads, the second asking while the first computes
    (`compute` stands in for compute_reference); returns each thread's (reference, reused) or error."""
    import threading

    _, _, net, images, _ = digits
    layers = [len(net.layers) - 1]
    results: dict[int, object] = {}

    def ask(n):
        try:
            results[n] = cache.get_or_compute(net, images, layers, "fast", 1)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            results[n] = exc

    first = threading.Thread(target=ask, args=(0,))
    first.start()
    assert compute.started.wait(10)
    second = threading.Thread(target=ask, args=(1,))
    second.start()
    second.join(0.3)  # time to reach the cache; a second computation would start meanwhile
    compute.release.set()
    first.join(10)
    second.join(10)
    return results


class _GatedCompute:
    """compute_reference that holds the first call until released, and may fail it."""

    def __init__(self, fail_first: bool):
        import threading

        self.started, self.release = threading.Event(), threading.Event()
        self.calls, self.fail_first = 0, fail_first

    def __call__(self, *args):
        self.calls += 1
        if self.calls == 1:
            self.started.set()
            self.release.wait(10)
            if self.fail_first:
                raise RuntimeError("first computation failed")
        else:
            self.release.set()  # a second computation while the first runs: let both finish
        return compute_reference(*args)


def test_threads_asking_for_the_same_reference_at_once_compute_it_once(digits, monkeypatch):
    cache = ReferenceCache()
    compute = _GatedCompute(fail_first=False)
    monkeypatch.setattr(reference_module, "compute_reference", compute)
    results = _two_threads_ask_at_once(cache, digits, compute)
    assert compute.calls == 1 and cache.computed == 1 and cache.hits == 1
    (first, reused_first), (second, reused_second) = results[0], results[1]
    assert first is second and (reused_first, reused_second) == (False, True)


def test_when_the_first_computation_fails_a_waiting_thread_computes_it_itself(digits, monkeypatch):
    cache = ReferenceCache()
    compute = _GatedCompute(fail_first=True)
    monkeypatch.setattr(reference_module, "compute_reference", compute)
    results = _two_threads_ask_at_once(cache, digits, compute)
    assert isinstance(results[0], RuntimeError)
    reference, reused = results[1]
    assert compute.calls == 2 and cache.computed == 1 and not reused and reference.sealed and len(cache) == 1


def test_threads_waiting_share_a_reference_the_cache_does_not_keep(digits, monkeypatch):
    # Too large for the cache's bound: before, each waiter computed it again, one after another.
    cache = ReferenceCache(max_bytes=0)
    compute = _GatedCompute(fail_first=False)
    monkeypatch.setattr(reference_module, "compute_reference", compute)
    results = _two_threads_ask_at_once(cache, digits, compute)
    (first, reused_first), (second, reused_second) = results[0], results[1]
    assert compute.calls == 1 and first is second and (reused_first, reused_second) == (False, True)
    assert len(cache) == 0 and (cache.computed, cache.hits) == (1, 1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_does_not_wait_for_a_computation_of_a_thread_it_does_not_have(digits, monkeypatch):
    # A fork while another thread computes a key leaves the child a record that nobody in it will
    # ever finish: the child must compute the reference itself, not wait forever.
    import signal
    import threading

    _, _, net, images, _ = digits
    layers = [len(net.layers) - 1]
    cache = ReferenceCache()
    compute = _GatedCompute(fail_first=False)
    monkeypatch.setattr(reference_module, "compute_reference", compute)
    computing = threading.Thread(target=cache.get_or_compute, args=(net, images, layers, "fast", 1))
    computing.start()
    try:
        assert compute.started.wait(10)
        pid = os.fork()
        if pid == 0:  # the child: a hang ends at the alarm (SIGALRM kills it)
            signal.alarm(30)
            try:
                reference, reused = cache.get_or_compute(net, images, layers, "fast", 1)
                os._exit(0 if reference.sealed and not reused else 1)
            except BaseException:  # noqa: BLE001 - any failure is the child's exit status
                os._exit(2)
        _, status = os.waitpid(pid, 0)
    finally:
        compute.release.set()
        computing.join(10)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child wait status {status}"


def test_an_interrupt_while_a_key_is_registered_leaves_no_thread_waiting_for_it(digits):
    # An interrupt (here raised by the eviction that makes room) between registering the key and
    # computing it must not leave the key registered: later requests would wait for it forever.
    import threading

    _, _, net, images, _ = digits
    layers = [len(net.layers) - 1]

    class InterruptedOnce(OrderedDict):
        interrupted = False

        def popitem(self, last=True):
            if not InterruptedOnce.interrupted:
                InterruptedOnce.interrupted = True
                raise KeyboardInterrupt
            return super().popitem(last)

    cache = ReferenceCache(max_entries=1)
    cache.put("an earlier run's key", compute_reference(net, images[:2], layers, "fast", 1))
    cache._entries = InterruptedOnce(cache._entries)
    with pytest.raises(KeyboardInterrupt):
        cache.get_or_compute(net, images, layers, "fast", 1)
    later = threading.Thread(target=cache.get_or_compute, args=(net, images, layers, "fast", 1), daemon=True)
    later.start()
    later.join(30)
    assert not later.is_alive(), "a later request waits for the interrupted computation"
    assert cache.computed == 1


def test_a_writer_shares_one_reference_and_keeps_it_alive(digits, tmp_path):
    """A second share_reference is refused (it would drop the writer's hold on the first, whose
    bytes the file's layers read); the first, dropped by Python, is still what the file gets."""
    _, _, net, images, labels = digits
    every_layer = range(len(net.layers))
    writer = _core.ResultsWriter(str(tmp_path / "w.h5"), net, labels, [(0, 0, 0.0)], "{}", "none")
    first = compute_reference(net, images, every_layer, "fast", 1)
    expected = first.layer(len(net.layers) - 1, net).copy()
    writer.share_reference(first)
    with pytest.raises(aimcemu.FormatError, match="already shares a reference"):
        writer.share_reference(compute_reference(net, images, every_layer, "fast", 1))
    del first
    import gc
    gc.collect()
    outputs = _core.run_network(net, images, "fast", 1)
    for i, values in enumerate(outputs):
        writer.set_round(0, i, values)
    writer.commit()
    with h5py.File(tmp_path / "w.h5") as f:
        np.testing.assert_array_equal(f["reference_logits"][()].reshape(expected.shape), expected)


def test_two_passes_cannot_fill_one_reference_at_once():
    """run_network(into=) claims the reference: of two threads filling one at once (a pass long
    enough, ~0.1 s, for the second to start while the first runs), one is refused, and the
    reference is the PU's output."""
    import threading

    net = _core.zoo.resnet18(1, 64, 10)
    images = np.random.default_rng(5).integers(-128, 128, size=(16, *net.input_shape), dtype=np.int8)
    layers = [0, len(net.layers) - 1]
    reference = _core.ReferenceActivations(net, len(images), layers)
    errors = []

    def fill():
        try:
            _core.run_network(net, images, "fast", 1, None, [], into=reference)
        except aimcemu.FormatError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=fill) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 1 and ("another pass is filling" in errors[0] or "already filled" in errors[0]), errors
    expected = _core.run_network(net, images, "fast", 1)
    for i in layers:
        np.testing.assert_array_equal(reference.layer(i, net), expected[i])
