"""examples/mlp.py: the spirals MLP on the 2x2 mesh learns (loss falls,
held-out points classified)."""
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import mlp  # noqa: E402


def test_mlp_example_learns_the_spirals(dt):
    losses, accuracy = mlp.train(steps=150, lr=3e-2, log=lambda *a: None)
    assert np.mean(losses[-10:]) < 0.5 * losses[0], losses
    assert accuracy > 0.85
