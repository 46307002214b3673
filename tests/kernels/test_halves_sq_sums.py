"""ops.paired.halves_sq_sums (the capture's eager call): the same sums as grouped_sq_sums on the halves,
and the same errors for what it does not check itself."""

import pytest
import torch

from vitplast_kernels.ops.paired import grouped_sq_sums, halves_sq_sums


def _halves(tensors):
    b = tensors[0].shape[0] // 2
    return [t[:b] for t in tensors], [t[b:] for t in tensors]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_halves_equal_the_grouped_sums_bitwise(dtype):
    g = torch.Generator().manual_seed(0)
    tensors = [torch.randn(6, 5, 7, generator=g).to(dtype), torch.randn(6, 11, generator=g).to(dtype)[:, ::2]]
    got = halves_sq_sums(tensors)
    want = grouped_sq_sums(*_halves(tensors))
    assert got.dtype == torch.float64 and got.shape == (2, 3)
    assert torch.equal(got, want)


@pytest.mark.parametrize("case", ["odd rows", "mixed dtypes", "rows differ", "one dim"])
def test_inputs_it_does_not_take_raise_the_grouped_ops_errors(case):
    x = torch.randn(4, 3, 2)
    tensors = {"odd rows": [torch.randn(3, 4)], "mixed dtypes": [x, x.double()],
               "rows differ": [x, torch.randn(6, 3)], "one dim": [x, torch.randn(4)]}[case]
    with pytest.raises((ValueError, TypeError)) as got:
        halves_sq_sums(tensors)
    with pytest.raises(type(got.value)) as want:
        grouped_sq_sums(*_halves(tensors))
    assert str(got.value) == str(want.value)
