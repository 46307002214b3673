"""ForwardState (the per-forward bookkeeping of a capture): a tensor shared by two hooks of a layer is
found again while it lives, changed or gone it is not, and the state never keeps it alive (eager)."""

from __future__ import annotations

import gc
import weakref

import torch

from vitplast_kernels.measure.forward_state import ForwardState


def test_a_kept_tensor_is_found_while_it_lives_and_not_held():
    state = ForwardState()
    t, sums = torch.ones(4, 3), torch.zeros(2)
    state.keep(0, [(t, sums)])
    assert state.reduced(0, t) is sums
    assert state.reduced(1, t) is None  # another layer's
    assert state.reduced(0, torch.ones(4, 3)) is None  # an equal tensor is not the same tensor
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None  # the state did not keep the activation alive


def test_a_tensor_changed_in_place_after_it_was_kept_is_reduced_again():
    state = ForwardState()
    t, sums = torch.ones(4, 3), torch.zeros(2)
    state.keep(0, [(t, sums)])
    t.add_(1)
    assert state.reduced(0, t) is None


def test_a_new_layer_forgets_the_last_layers_tensors():
    state = ForwardState()
    a, b = torch.ones(4, 3), torch.ones(4, 3)
    state.keep(0, [(a, torch.zeros(2))])
    state.keep(1, [(b, torch.zeros(2))])
    assert state.reduced(0, a) is None and state.reduced(1, b) is not None
