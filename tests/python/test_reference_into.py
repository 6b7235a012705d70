"""_core.run_network(..., into=reference) on a slice of a run's images (first_image != 0): the
reference holds the slice's images at their positions in the call, and their analog noise is
keyed by their index in the whole run, so a slice's reference equals the same images of a pass
over all of them, bit for bit, at any thread count."""
from __future__ import annotations

import numpy as np
import pytest

from test_peripherals import hook, linear_net

IMAGES, FIRST = 10, 4


@pytest.fixture
def noisy_layer(core, rng):
    """A linear layer behind aihwkit-like peripherals (noise keyed by image index) and 10 images."""
    net = linear_net(core, 64, 24, rng, 100)
    images = rng.integers(-128, 128, (IMAGES, 1, 1, 64)).astype(np.int8)
    return net, images, hook(core, net, {"preset": "aihwkit"})


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_slices_reference_is_the_whole_runs_images_at_their_run_wide_index(core, noisy_layer, threads):
    net, images, peripherals = noisy_layer
    whole = core.run_network(net, images, "fast", threads, peripherals=peripherals)[0]
    reference = core.ReferenceActivations(net, IMAGES - FIRST, [0])
    core.run_network(net, images[FIRST:], "fast", threads, None, [], peripherals=peripherals, first_image=FIRST,
                     into=reference)
    np.testing.assert_array_equal(reference.layer(0, net), whole[FIRST:])


def test_the_slices_noise_depends_on_first_image(core, noisy_layer):
    """Without first_image the slice's images would get the noise of the run's first images."""
    net, images, peripherals = noisy_layer
    whole = core.run_network(net, images, "fast", 1, peripherals=peripherals)[0]
    reference = core.ReferenceActivations(net, IMAGES - FIRST, [0])
    core.run_network(net, images[FIRST:], "fast", 1, None, [], peripherals=peripherals, into=reference)
    assert not np.array_equal(reference.layer(0, net), whole[FIRST:])
