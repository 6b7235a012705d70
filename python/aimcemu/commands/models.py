"""``aimcemu models``: the embedded model and the built-in zoo topologies."""
from __future__ import annotations

import argparse

HELP = "list the embedded model and the built-in zoo networks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def _describe_network(net) -> str:
    h, w, c = tuple(net.input_shape)
    out = net.layers[net.output_index()].out_shape
    return (f"{len(net.layers)} layers, input {h}x{w}x{c}, {out.h * out.w * out.c} outputs, "
            f"{net.total_weights()} int8 weights")


def main(args: argparse.Namespace) -> int:
    del args
    from .. import _core, modelfile

    print("embedded:")
    try:
        model_path, data_path = modelfile.embedded_paths()
    except FileNotFoundError as exc:
        print(f"  (none: {exc})")
    else:
        net = modelfile.load_model(model_path)
        print(f"  {modelfile.EMBEDDED_MODEL:<14} {net.name}: {_describe_network(net)}")
        print(f"  {'':<14} model {model_path}")
        if data_path.is_file():
            data = modelfile.load_dataset(data_path, net)
            print(f"  {'':<14} data  {data_path} ({len(data['labels'])} images; {data['source']})")
    print("zoo (synthetic weights, for timing):")
    for name in _core.zoo.names():
        print(f"  {name:<14} {_describe_network(_core.zoo.by_name(name))}")
    return 0
