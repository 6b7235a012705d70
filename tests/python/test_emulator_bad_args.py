"""Bad arguments to the emulator's bindings are refused by name instead of crashing or hanging:
None in a round's program list (was a null-pointer SIGSEGV), run_published before any round was
published (blocked forever with the GIL released, deaf to Ctrl-C), thread counts out of 0..4096.
The crashing and hanging cases run in a child process with a timeout."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aimcemu
from aimcemu import _core, modelfile, niu

CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    from aimcemu import _core, modelfile
    net = modelfile.load_model(str(modelfile.embedded_paths()[0]))
    emulator = _core.niu.Emulator(net, [0])
    images = np.zeros((2, 8, 8, 1), np.int8)
    try:
        if sys.argv[1] == "run_round":
            emulator.run_round([None], images)
        elif sys.argv[1] == "write_round":
            emulator.write_round([None])
        elif sys.argv[1] == "run_published":
            emulator.run_published(images)
    except ValueError as e:
        print("FormatError:", e)
    else:
        print("returned")
""")


@pytest.mark.parametrize("case, expected", [
    ("run_round", "programs[0]"),
    ("write_round", "programs[0]"),
    ("run_published", "no round published yet"),
])
def test_emulator_refuses_by_name_instead_of_crashing_or_blocking(case, expected):
    done = subprocess.run([sys.executable, "-c", CHILD, case], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"child exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.startswith("FormatError:") and expected in done.stdout, done.stdout


@pytest.fixture(scope="module")
def emulator_and_program():
    net = modelfile.load_model(str(modelfile.embedded_paths()[0]))
    program = niu.compile_program({"model": "pcm_like"}, [net.layers[0].weights], seed=1, chip=0, round=0,
                                  t=60.0, layer_ids=[0])
    return net, _core.niu.Emulator(net, [0]), program._program


@pytest.mark.parametrize("threads", [-1, 4097, 2**31 - 1])
def test_emulator_refuses_thread_counts_outside_0_to_4096(emulator_and_program, threads):
    net, emulator, program = emulator_and_program
    images = np.zeros((2, 8, 8, 1), np.int8)
    before = emulator.published_round
    with pytest.raises(aimcemu.FormatError, match="threads"):
        emulator.write_round([program], threads)
    with pytest.raises(aimcemu.FormatError, match="threads"):
        emulator.run_round([program], images, "fast", threads)
    assert emulator.published_round == before  # refused before any round was written
    emulator.write_round([program], 1)
    with pytest.raises(aimcemu.FormatError, match="threads"):
        emulator.run_published(images, "fast", threads)
    round_id, acts = emulator.run_published(images, "fast", 0)
    assert round_id == emulator.published_round and acts[0].shape[0] == 2
