"""Launch geometry of the all-pairs Triton kernels as plain integers: tile counts, K-splits, the three
launches' grids within CUDA's per-axis limits, and the largest offset each buffer is indexed with (the
kernels form offsets in int64). No Triton needed: tests check the arithmetic at any N."""

from __future__ import annotations

import math

GRID_AXIS_MAX = (2**31 - 1, 65535)  # CUDA's limits on grid axes 0 and 1 (programs)
FINISH_ROWS = 2  # tile rows per program of the finish kernel (ROWS * BM entries)


def num_tiles_of(n: int, bm: int) -> int:
    """``T``: tiles of the lower block triangle for ``n`` rows in blocks of ``bm``."""
    nb = math.ceil(n / bm)
    return nb * (nb + 1) // 2


def splits_for(num_tiles: int, sms: int, per_sm: int = 2) -> int:
    """K-splits giving about ``per_sm`` programs per SM over ``num_tiles`` tiles."""
    return max(1, math.ceil(per_sm * sms / num_tiles))


def _finish_rows(bm: int) -> int:
    return FINISH_ROWS if bm % FINISH_ROWS == 0 else 1


def launch_grids(n: int, bm: int, splits: int, jb: int) -> dict[str, tuple[int, int]]:
    """The three launches' grids for ``n`` rows (large dimensions on axis 0, small ones on axis 1);
    ``ValueError`` past CUDA's per-axis limits (`GRID_AXIS_MAX`)."""
    num_tiles = num_tiles_of(n, bm)
    grids = {"partial": (num_tiles, splits), "finish": (num_tiles, bm // _finish_rows(bm)),
             "recompute": (n, -(-n // jb))}
    for name, grid in grids.items():
        for axis, (size, limit) in enumerate(zip(grid, GRID_AXIS_MAX, strict=True)):
            if size > limit:
                raise ValueError(f"all-pairs {name} launch: grid axis {axis} needs {size} programs, "
                                 f"more than CUDA's {limit}: too many rows")
    return grids


def index_extents(n: int, k: int, stride_row: int, bm: int, splits: int) -> dict[str, int]:
    """The largest element offset each buffer is indexed with (exact Python integers: the kernels
    form them in int64)."""
    return {"x": (n - 1) * stride_row + k - 1, "workspace": splits * num_tiles_of(n, bm) * bm * bm - 1,
            "out": n * n - 1}
