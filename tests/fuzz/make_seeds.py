"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<harness>/).

    python3 tests/fuzz/make_seeds.py     # on the installed package (scripts/setup.sh)

Each corpus holds small valid files (so the fuzzer starts from inputs that reach every field
check) and one file per kind of bad input the loaders must refuse cleanly: truncated, not
HDF5, wrong types, claims larger than the file, links to other files, invalid UTF-8, a newer
format version, inconsistent counts.  Inputs that once crashed a loader are kept beside them as
regression-*.  Files are small (a few KB) so that fuzzing stays fast; the valid ones are
written by aimcemu itself, the bad ones by editing copies with h5py.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

import aimcemu
from aimcemu import _core, modelfile, niu

HERE = Path(__file__).resolve().parent / "corpus"


def tiny_network():
    """conv 3x3 (pad 1) -> max-pool 2 -> conv 1x1 + residual -> avg-pool -> linear: 6x6x2 in, 3 classes."""
    rng = np.random.default_rng(5)

    def layer(name, kind, **fields):
        l = _core.Layer()
        l.name, l.kind = name, kind
        for key, value in fields.items():
            setattr(l, key, value)
        return l

    conv = layer("conv", _core.LayerKind.conv, kernel=3, pad=1, out_channels=4, out_shift=6, relu=True,
                 weights=rng.integers(-60, 60, 3 * 3 * 2 * 4, dtype=np.int8), bias=rng.integers(-9, 9, 4, dtype=np.int8))
    pool = layer("pool", _core.LayerKind.max_pool, input=0, kernel=2, stride=2)
    mix = layer("mix", _core.LayerKind.conv, input=1, kernel=1, out_channels=4, out_shift=5, residual_input=1,
                weights=rng.integers(-60, 60, 16, dtype=np.int8), bias=np.zeros(4, np.int8))
    avg = layer("avg", _core.LayerKind.avg_pool, input=2, kernel=3, stride=3, avg_mult=7, out_shift=6)
    fc = layer("fc", _core.LayerKind.linear, input=3, out_channels=3, out_shift=6,
               weights=rng.integers(-60, 60, 4 * 3, dtype=np.int8), bias=rng.integers(-9, 9, 3, dtype=np.int8))
    net = _core.Network()
    net.name, net.input_shape, net.input_frac_bits = "tiny", _core.Shape3(6, 6, 2), 6
    net.layers = [conv, pool, mix, avg, fc]
    net.class_names = ["a", "b", "c"]
    net.resolve()
    return net


def edited(source: Path, target: Path, edit) -> None:
    """A copy of `source` changed by edit(h5py.File) (h5py writes what the C++ writer never would)."""
    shutil.copy(source, target)
    with h5py.File(target, "r+") as f:
        edit(f)


def truncated(source: Path, target: Path, fraction: float) -> None:
    data = source.read_bytes()
    target.write_bytes(data[: int(len(data) * fraction)])


def set_attr(path: str, name: str, value):
    def edit(f):
        obj = f[path]
        if name in obj.attrs:
            del obj.attrs[name]
        obj.attrs[name] = value
    return edit


def replace_dataset(path: str, **create):
    def edit(f):
        del f[path]
        f.create_dataset(path, **create)
    return edit


def both(first, second):
    def edit(f):
        first(f)
        second(f)
    return edit


WINDOW_FIELDS = ("kernel_h", "kernel_w", "stride_h", "stride_w", "pad_top", "pad_bottom", "pad_left", "pad_right")


def downgrade_to_v1(f) -> None:
    """Rewrites a version-2 model file (square windows only) in the version-1 layout."""
    f.attrs["format_version"] = np.int32(1)
    for group in f["layers"].values():
        window = {name: int(group.attrs[name]) for name in WINDOW_FIELDS}
        for name in WINDOW_FIELDS:
            del group.attrs[name]
        group.attrs["kernel"] = np.int32(window["kernel_h"])
        group.attrs["stride"] = np.int32(window["stride_h"])
        group.attrs["pad"] = np.int32(window["pad_top"])


def model_corpus(folder: Path, scratch: Path) -> Path:
    net = tiny_network()
    good = folder / "tiny.h5"
    modelfile.save_model(net, good)
    bad = {
        "class_names_count": set_attr("/", "class_names", np.array([b"x", b"y"], dtype=h5py.string_dtype())),
        "kind_unknown": set_attr("layers/conv", "kind", "lstm"),
        "kernel_h_int64_huge": set_attr("layers/conv", "kernel_h", np.int64(2**40)),
        "kernel_w_uint64_top": set_attr("layers/conv", "kernel_w", np.uint64(2**64 - 1)),
        "pad_left_big": set_attr("layers/conv", "pad_left", np.int32(2**30)),
        "pad_bottom_negative": set_attr("layers/pool", "pad_bottom", np.int32(-1)),
        "square_fields_in_v2": both(set_attr("layers/conv", "kernel", np.int32(3)),
                                    lambda f: f["layers/conv"].attrs.__delitem__("kernel_h")),
        "out_channels_max": set_attr("layers/fc", "out_channels", np.int32(2**31 - 1)),
        "stride_w_array": set_attr("layers/pool", "stride_w", np.array([1, 2], np.int32)),
        "input_shape_huge": set_attr("/", "input_shape", np.array([2**20, 2**20, 2**20], np.int32)),
        "name_not_utf8": set_attr("/", "name", np.bytes_(b"ti\xffny")),
        "weights_float": replace_dataset("layers/conv/weights", data=np.zeros((4, 3, 3, 2), np.float32)),
        "weights_claim_huge": replace_dataset("layers/conv/weights", shape=(4, 3, 3, 2**28), dtype=np.int8),
        "weights_chunks_missing": replace_dataset("layers/fc/weights", shape=(3, 2**24), dtype=np.int8,
                                                  chunks=(1, 2**16), compression="gzip"),
        "format_version_99": set_attr("/", "format_version", np.int32(99)),
        "format_foreign": set_attr("/", "format", "netcdf"),
    }
    for name, edit in bad.items():
        edited(good, folder / f"bad-{name}.h5", edit)

    # Version 1 (one square kernel, stride and pad per layer) still loads: a valid seed, and the
    # old square fields' own checks.
    good_v1 = folder / "tiny-v1.h5"
    edited(good, good_v1, downgrade_to_v1)
    bad_v1 = {
        "v1_kernel_int64_huge": set_attr("layers/conv", "kernel", np.int64(2**40)),
        "v1_pad_missing": lambda f: f["layers/conv"].attrs.__delitem__("pad"),
    }
    for name, edit in bad_v1.items():
        edited(good_v1, folder / f"bad-{name}.h5", edit)

    def external_link(f):
        del f["layers/fc"]
        f["layers/fc"] = h5py.ExternalLink("/dev/zero", "/")
    edited(good, folder / "bad-external_link.h5", external_link)

    def soft_link(f):
        f["layers/loop"] = h5py.SoftLink("/layers/loop")
    edited(good, folder / "bad-soft_link.h5", soft_link)

    def external_storage(f):
        raw = scratch / "raw.bin"
        raw.write_bytes(bytes(36 * 4))
        del f["layers/conv/weights"]
        f.create_dataset("layers/conv/weights", shape=(4, 3, 3, 2), dtype=np.int8, external=[(os.fspath(raw), 0, 72)])
    edited(good, folder / "bad-external_storage.h5", external_storage)

    def layer_name_not_utf8(f):
        layers = f["layers"]
        layers.id.links.create_hard(b"f\xffc", layers.id, b"fc")
        del layers["fc"]
    edited(good, folder / "bad-layer_name_not_utf8.h5", layer_name_not_utf8)

    truncated(good, folder / "bad-truncated_half.h5", 0.5)
    truncated(good, folder / "bad-truncated_header.h5", 0.02)
    (folder / "bad-not_hdf5.h5").write_bytes(b"model: not an HDF5 file\n" * 8)
    (folder / "bad-empty.h5").write_bytes(b"")
    return good


def dataset_corpus(folder: Path) -> Path:
    rng = np.random.default_rng(6)
    good = folder / "tiny.h5"
    modelfile.save_dataset(rng.integers(-128, 128, (5, 6, 6, 2), dtype=np.int8), rng.integers(0, 3, 5), good,
                           source="fuzz seed", description="five 6x6x2 images", input_frac_bits=6)
    bad = {
        "zero_images": replace_dataset("images", shape=(0, 6, 6, 2), dtype=np.int8),
        "images_claim_1e9": both(replace_dataset("images", shape=(10**9, 8, 8, 1), dtype=np.int8,
                                                 chunks=(1024, 8, 8, 1), compression="gzip"),
                                 replace_dataset("labels", shape=(10**9,), dtype=np.int64, chunks=(4096,),
                                                 compression="gzip")),
        "images_contiguous_unwritten": both(replace_dataset("images", shape=(20000, 6, 6, 2), dtype=np.int8),
                                            replace_dataset("labels", data=np.zeros(20000, np.uint8))),
        "images_dims_huge": replace_dataset("images", shape=(1, 2**31, 1, 1), dtype=np.int8,
                                            chunks=(1, 2**16, 1, 1)),
        "labels_float": replace_dataset("labels", data=np.zeros(5, np.float64)),
        "labels_negative": replace_dataset("labels", data=-np.ones(5, np.int64)),
        "labels_short": replace_dataset("labels", data=np.zeros(4, np.int64)),
        "source_not_utf8": set_attr("/", "source", np.bytes_(b"\xff\xfe")),
        "frac_bits_big": set_attr("/", "input_frac_bits", np.int32(99)),
        "format_version_2": set_attr("/", "format_version", np.int32(2)),
    }
    for name, edit in bad.items():
        edited(good, folder / f"bad-{name}.h5", edit)
    truncated(good, folder / "bad-truncated_half.h5", 0.5)
    (folder / "bad-not_hdf5.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 40)
    return good


def results_corpus(folder: Path, scratch: Path) -> None:
    net = tiny_network()
    model, data = scratch / "model.h5", scratch / "test_set.h5"
    modelfile.save_model(net, model)
    rng = np.random.default_rng(7)
    modelfile.save_dataset(rng.integers(-128, 128, (4, 6, 6, 2), dtype=np.int8), rng.integers(0, 3, 4), data,
                           input_frac_bits=6)
    digital = folder / "digital.h5"
    aimcemu.run(model, data, output=digital, layers="fc")
    noisy = folder / "noisy.h5"
    aimcemu.run(model, data, output=noisy, mapping="all", noise={"model": "pcm_like"}, t=(0.0, 3600.0), chips=2,
                drift_compensation=["none", "global"], layers=["conv", "fc"])
    bad = {
        "format_version_99": set_attr("/", "format_version", np.int32(99)),
        "format_foreign": set_attr("/", "format", "aimcemu-model"),
        "accuracy_short": replace_dataset("accuracy", data=np.zeros(3)),
        "accuracy_above_one": replace_dataset("accuracy", data=np.full(8, 2.0)),
        "round_not_positions": replace_dataset("round", data=np.arange(8)[::-1].astype(np.int64)),
        "t_negative": replace_dataset("t", data=-np.ones(8)),
        "layer_names_differ": set_attr("/", "layer_names", np.array([b"conv"], dtype=h5py.string_dtype())),
        "activations_shape": replace_dataset("layers/conv/activations", shape=(8, 4, 6, 6, 5), dtype=np.int8),
        "config_not_utf8": set_attr("/", "config", np.bytes_(b"{\xff}")),
        "labels_claim_huge": replace_dataset("labels", shape=(2**30,), dtype=np.int64, chunks=(2**12,),
                                             compression="gzip"),
    }
    for name, edit in bad.items():
        edited(noisy, folder / f"bad-{name}.h5", edit)

    def missing_layer(f):
        del f["layers/mix"]
    edited(noisy, folder / "bad-missing_layer.h5", missing_layer)
    truncated(noisy, folder / "bad-truncated_half.h5", 0.5)
    (folder / "bad-not_hdf5.h5").write_bytes(b"{}")


def niu_corpus(folder: Path) -> None:
    rng = np.random.default_rng(8)
    layers = [rng.integers(-127, 128, 64, dtype=np.int8), rng.integers(-127, 128, 40, dtype=np.int8)]
    one = niu.compile_program({"model": "pcm_like"}, layers[:1], seed=3, chip=1, round=2, t=3600.0).words()
    two = niu.compile_program({"model": "pcm_like"}, layers, seed=2**64 - 1, chip=5, t=86400.0, out_bits=4).words()
    (folder / "one_layer.bin").write_bytes(np.asarray(one, np.uint32).tobytes())
    (folder / "two_layers.bin").write_bytes(np.asarray(two, np.uint32).tobytes())
    header = np.asarray(one, np.uint32)[:8].copy()
    (folder / "bad-header_only.bin").write_bytes(header.tobytes())
    wrong = np.asarray(two, np.uint32).copy()
    wrong[0] ^= 1
    (folder / "bad-magic.bin").write_bytes(wrong.tobytes())
    (folder / "bad-truncated.bin").write_bytes(np.asarray(two, np.uint32)[:-3].tobytes())


def main() -> int:
    for name in ("fuzz_model_file", "fuzz_dataset_file", "fuzz_results_file", "fuzz_niu_program"):
        folder = HERE / name
        for old in folder.glob("*") if folder.is_dir() else []:
            if not old.name.startswith("regression-"):  # found crashes stay
                old.unlink()
        folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        model_corpus(HERE / "fuzz_model_file", Path(scratch))
        dataset_corpus(HERE / "fuzz_dataset_file")
        results_corpus(HERE / "fuzz_results_file", Path(scratch))
        niu_corpus(HERE / "fuzz_niu_program")
    for folder in sorted(HERE.iterdir()):
        files = sorted(folder.iterdir())
        print(f"{folder.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
