"""A model or data set file renamed over while it loads (a training job saving checkpoints with
rename(), as save_model does) loads whole as the file that was there when the load began: never one
file's structure and metadata with the other's weights.

The window between the checking process's read and this process's lasts microseconds; the test-only
hook ``_core.files.set_between_reads_hook_for_tests`` (formats/between_reads_hook.hpp) replaces the
file exactly there."""
from __future__ import annotations

import os

import numpy as np

from aimcemu import _core, modelfile


def checkpoint(seed):
    net = _core.zoo.resnet18(seed, 32, 10)
    net.name = f"checkpoint-{seed}"
    net.class_names = [f"class-{i}-of-{seed}" for i in range(10)]
    return net


def assert_same_network(loaded, file):
    assert loaded.name == file.name
    assert list(loaded.class_names) == list(file.class_names)
    assert loaded.input_frac_bits == file.input_frac_bits
    assert [l.name for l in loaded.layers] == [l.name for l in file.layers]
    for a, b in zip(loaded.layers, file.layers):
        assert np.array_equal(a.weights, b.weights), f"weights of {b.name}"
        assert np.array_equal(a.bias, b.bias), f"bias of {b.name}"


def test_a_model_file_renamed_over_during_the_load_loads_whole_as_the_first_file(tmp_path, replace_between_reads):
    assert _core.files.check_helper(), "this build has no checking process"
    model, following = tmp_path / "model.h5", tmp_path / "following.h5"
    modelfile.save_model(checkpoint(1), model)
    modelfile.save_model(checkpoint(2), following)
    first, second = modelfile.load_model(model), modelfile.load_model(following)
    assert not np.array_equal(first.layers[0].weights, second.layers[0].weights)

    replaced = replace_between_reads(model, following)
    loaded = modelfile.load_model(model)
    assert replaced == [os.fspath(model)]
    assert_same_network(loaded, first)
    assert_same_network(modelfile.load_model(model), second)  # the path names the new file now


def test_a_data_set_renamed_over_between_its_check_and_its_read_loads_as_the_first_file(tmp_path, replace_between_reads):
    """As a run reads them: the model and the data set checked in one checking process, the data set
    read later by this process (load_dataset with the check)."""
    model, data, following = tmp_path / "model.h5", tmp_path / "data.h5", tmp_path / "following.h5"
    modelfile.save_model(checkpoint(1), model)
    images = np.arange(2 * 32 * 32 * 3, dtype=np.int64).astype(np.int8).reshape(2, 32, 32, 3)
    modelfile.save_dataset(images, np.array([1, 2]), data, source="first", description="the first data set")
    modelfile.save_dataset(-images, np.array([3, 4]), following, source="second", description="the second")

    replaced = replace_between_reads(data, following)
    net, check = modelfile.load_model_and_check_dataset(model, data)
    loaded = modelfile.load_dataset(data, net, check)
    assert replaced == [os.fspath(data)]
    assert np.array_equal(loaded["images"], images)
    assert np.array_equal(loaded["labels"], [1, 2])
    assert (loaded["source"], loaded["description"]) == ("first", "the first data set")
    assert modelfile.load_dataset(data)["source"] == "second"


def test_a_check_gives_up_its_data_set_file_once_the_data_set_is_read(tmp_path):
    # The check holds the data set file open for the caller's read; a check kept after that read
    # (a script keeping (network, check) pairs) must not keep a descriptor each.
    net = checkpoint(1)
    model, data = tmp_path / "model.h5", tmp_path / "data.h5"
    modelfile.save_model(net, model)
    images = np.zeros((2, *tuple(net.input_shape)), np.int8)
    modelfile.save_dataset(images, np.zeros(2, np.int64), data)

    def open_descriptors():
        return len(os.listdir("/proc/self/fd"))

    loaded, check = modelfile.load_model_and_check_dataset(model, data)  # starts the kept checking process
    modelfile.load_dataset(data, loaded, check)
    before = open_descriptors()
    kept = []
    for _ in range(5):
        loaded, check = modelfile.load_model_and_check_dataset(model, data)
        modelfile.load_dataset(data, loaded, check)
        kept.append(check)
    assert open_descriptors() == before
    again = modelfile.load_dataset(data, loaded, kept[-1])  # read already: checked and read afresh
    assert again["images"].shape == images.shape


CORPUS = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "fuzz_results_file")


def test_task_files_read_at_resume_are_the_files_the_checking_process_read(tmp_path, replace_between_reads):
    """A sweep's task files at resume (results.read_task_summaries, one checking process per batch):
    a file renamed over a task file between the check and the read is not what is read."""
    from aimcemu import results

    tasks = [tmp_path / f"task{i}.h5" for i in range(3)]
    for i, task in enumerate(tasks):
        task.write_bytes(open(os.path.join(CORPUS, "noisy.h5" if i != 1 else "digital.h5"), "rb").read())
    following = tmp_path / "following.h5"
    following.write_bytes(open(os.path.join(CORPUS, "digital.h5"), "rb").read())
    expected = [results.read_task_summary(task) for task in tasks]
    assert expected[0] != expected[1]
    replaced = replace_between_reads(tasks[2], following)
    summaries = results.read_task_summaries(tasks)
    assert replaced == [os.fspath(tasks[2])]
    assert summaries == expected
    assert results.read_task_summary(tasks[2]) == expected[1]  # the path names the following file now
