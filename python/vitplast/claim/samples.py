"""The arrays a claim's analysis starts from, computed before any test is run.

- **Accuracy.** ``acc[t, lr, s]`` is the final test accuracy of train ``t`` (a component, a unit, a
  set of units, a baseline) at learning rate ``lr`` and seed ``s``. Each train keeps the learning rate
  whose mean accuracy over seeds is best (ties: the first lr listed); its per-seed accuracies are read
  at that lr, and its **gain** is their paired difference, seed by seed, from the reference: the
  head-only run of the same seed, or the accuracy before finetuning.
- **Plasticity.** The chunk statistics saved by `.plasticity.measure_chunks`, read back as the kernel
  package's ``ChunkedResult``: the mean rate of every (component, layer) and of every component over
  all pairs, their pair counts and the pairs left out.
- **Bootstrap replicates.** One generator seeded with ``--stats-seed`` draws the multiplicities of the
  seeds ``(B, S)``, then of the pair chunks ``(B, K)`` (each row a resample). A replicate of the gains
  resamples the seeds, one multiset shared by every train and lr, the lr chosen again in each
  replicate; a replicate of plasticity resamples the chunks, one multiset shared by every component.

`claim_samples` computes all of them at once for a component or a layer claim; `accuracy_cube` and
`relative_gains` also serve the selection at equal budget (`.budgets`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vitplast_kernels.measure.chunks import ChunkedResult

from ..runs.summary import RunSummary


def resample_counts(rng: np.random.Generator, n: int, replicates: int) -> np.ndarray:
    """``(replicates, n)`` multiplicities of a bootstrap resample of ``n`` units (each row sums to n)."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=replicates).astype(np.float64)


# ------------------------------------------------------------------------------------------ accuracy
def accuracy_cube(summaries: list, trains: list[str], lrs: list[float], seeds: list[int], *,
                  holdout: bool = False):
    """``(acc (T, LR, S), initial (S,), params {train: n})`` from run summaries (`RunSummary`, or their
    fields); ``holdout``: the accuracy on the held-out split instead of the final one. A (train, lr) is
    run for every seed or for none (``--lr auto`` widens one train's grid only): NaN marks one not
    run."""
    acc = np.full((len(trains), len(lrs), len(seeds)), np.nan)
    initial = np.full((len(seeds),), np.nan)
    params: dict[str, int] = {}
    ti, li, si = ({t: i for i, t in enumerate(trains)}, {float(v): i for i, v in enumerate(lrs)},
                  {s: i for i, s in enumerate(seeds)})
    for s in map(RunSummary.of, summaries):
        acc[ti[s.train], li[s.lr], si[s.seed]] = s.holdout_acc if holdout else s.final_acc
        initial[si[s.seed]] = s.initial_acc
        params[s.train] = s.trainable_params
    missing = np.isnan(acc)
    if (missing.any(-1) & ~missing.all(-1)).any() or missing.all(-1).all(-1).any():
        raise ValueError("accuracy_cube: a (train, lr, seed) combination has no summary")
    return acc, initial, params


def best_over_lrs(acc_mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(best value, its index)`` over the learning-rate axis (-1), lrs not run (NaN) skipped; ties:
    the first lr listed."""
    idx = np.argmax(np.where(np.isnan(acc_mean), -np.inf, acc_mean), axis=-1)
    return np.take_along_axis(acc_mean, idx[..., None], -1)[..., 0], idx


def best_replicates(acc: np.ndarray, seed_counts: np.ndarray) -> np.ndarray:
    """``(B, T)``: each train's best mean accuracy over its lrs when the seeds are resampled with
    ``seed_counts`` ``(B, S)`` (the lr chosen again in each replicate)."""
    run = ~np.isnan(acc).all(-1)  # (T, LR)
    reps = np.einsum("tls,bs->btl", np.nan_to_num(acc), seed_counts) / acc.shape[-1]
    return np.where(run[None], reps, -np.inf).max(-1)


def lr_edge(acc: np.ndarray, t: int, idx: int) -> str | None:
    """``"low"``/``"high"`` when train ``t``'s best lr index ``idx`` is the smallest/largest lr it was
    run at (its gain may be clipped by the grid), None when interior or with one lr only."""
    run = np.flatnonzero(~np.isnan(acc[t]).all(-1))
    if len(run) < 2:
        return None
    return "low" if idx == run[0] else "high" if idx == run[-1] else None


def by_lr(acc: np.ndarray, t: int, lrs: list[float]) -> dict[str, float]:
    """``{lr: mean accuracy}`` of train ``t`` over the lrs it was run at."""
    return {f"{lr:g}": float(v) for lr, v in zip(lrs, acc[t].mean(-1), strict=True) if np.isfinite(v)}


def relative_gains(best: np.ndarray, head: int | None) -> np.ndarray:
    """The paper's ``relative_gain = (acc - acc_LP) / acc_LP`` per train: ``acc`` its best mean accuracy
    over seeds across learning rates (``best``, ``(T,)``), ``acc_LP`` the head-only run's (linear
    probing, train index ``head``); NaN without a head-only run."""
    if head is None or not best[head] > 0:
        return np.full(best.shape, np.nan)
    return (best - best[head]) / best[head]


def holdout_cube(summaries: list, trains: list[str], lrs: list[float], seeds: list[int]):
    """``(T, LR, S)`` accuracy on a validation split held out from the training data (the summaries'
    ``holdout_acc``), or None when a run has none (the runs of this version hold none)."""
    if not summaries or any(RunSummary.of(s).holdout_acc is None for s in summaries):
        return None
    cube, _, _ = accuracy_cube(summaries, trains, lrs, seeds, holdout=True)
    return cube


def relative_gains_validated(acc: np.ndarray, holdout: np.ndarray | None, head: int | None) -> np.ndarray:
    """The relative gain with each train's lr chosen on the held-out validation split (its test
    accuracy at that lr): the paper picks the lr on the test set, which flatters the gains. NaN when the
    runs hold no validation accuracy or there is no head-only run."""
    if holdout is None or head is None:
        return np.full(acc.shape[0], np.nan)
    _, idx = best_over_lrs(holdout.mean(-1))
    chosen = acc.mean(-1)[np.arange(acc.shape[0]), idx]
    return relative_gains(chosen, head)


def relative_gain_table(summaries: list, seeds: list[int]) -> tuple[dict, dict]:
    """``({train: relative gain}, {train: trainable parameters})`` of every train of ``summaries``, each
    at the best of the lrs it was run at (`relative_gains`; NaN without a head-only run)."""
    summaries = [RunSummary.of(s) for s in summaries]
    trains = list(dict.fromkeys(s.train for s in summaries))
    lrs = sorted({s.lr for s in summaries})
    acc, _, params = accuracy_cube(summaries, trains, lrs, seeds)
    best, _ = best_over_lrs(acc.mean(-1))
    gains = relative_gains(best, trains.index("head") if "head" in trains else None)
    return dict(zip(trains, gains, strict=True)), params


@dataclasses.dataclass(frozen=True)
class Accuracy:
    """The accuracy arrays of ``trains`` (the ranked ones first, the head-only run last when it is the
    reference): ``acc`` ``(T, LR, S)``, ``initial`` ``(S,)``, ``params`` ``{train: n}``, each train's
    best lr index ``best_idx`` ``(T,)``, accuracy there ``per_seed`` ``(T, S)``, its ``lr_edge`` and
    mean accuracy per lr (``by_lr``); every train's gain over the reference seed by seed
    (``gains_seed`` ``(T, S)``), the bootstrap replicates ``gain_reps`` ``(B, R)`` of the ``R`` ranked
    trains' mean gains; the paper's ``relative_gain`` and ``relative_gain_validated`` ``(T,)`` (NaN
    where undefined) and whether the runs held out a validation split (``holdout``)."""

    trains: list[str]
    acc: np.ndarray
    initial: np.ndarray
    params: dict
    best_idx: np.ndarray
    per_seed: np.ndarray
    lr_edges: list
    by_lr: list
    gains_seed: np.ndarray
    gain_reps: np.ndarray
    relative_gain: np.ndarray
    relative_gain_validated: np.ndarray
    holdout: bool


def accuracy_samples(summaries: list, trains: list[str], lrs: list[float], seeds: list[int], *,
                     ranked: int, baseline: str, seed_counts: np.ndarray) -> Accuracy:
    """The accuracy arrays (`Accuracy`) of ``trains``, whose first ``ranked`` are ranked by the claim;
    the gains' reference is the last train (``baseline="head"``) or the accuracy before finetuning
    (``"initial"``)."""
    acc, initial, params = accuracy_cube(summaries, trains, lrs, seeds)
    best, best_idx = best_over_lrs(acc.mean(-1))  # (T,)
    per_seed = acc[np.arange(len(trains)), best_idx]  # (T, S) at each train's chosen lr
    base_seed = per_seed[-1] if baseline == "head" else initial
    best_reps = best_replicates(acc, seed_counts)  # (B, T): seeds resampled, the lr chosen again
    base_reps = best_reps[:, -1] if baseline == "head" else seed_counts @ initial / len(seeds)
    head = trains.index("head") if "head" in trains else None
    holdout = holdout_cube(summaries, trains, lrs, seeds)
    return Accuracy(
        trains=trains, acc=acc, initial=initial, params=params, best_idx=best_idx, per_seed=per_seed,
        lr_edges=[lr_edge(acc, t, int(best_idx[t])) for t in range(len(trains))],
        by_lr=[by_lr(acc, t, lrs) for t in range(len(trains))],
        gains_seed=per_seed - base_seed, gain_reps=best_reps[:, :ranked] - base_reps[:, None],
        relative_gain=relative_gains(best, head),
        relative_gain_validated=relative_gains_validated(acc, holdout, head), holdout=holdout is not None)


# ------------------------------------------------------------------------------------------ plasticity
@dataclasses.dataclass(frozen=True)
class Plasticity:
    """The plasticity arrays of the measured ``components`` (in measured order) over ``layers``:
    ``per_layer`` ``(C, L)`` and ``overall`` ``(C,)`` mean rates over all pairs (NaN without pairs),
    ``pairs`` ``(C,)`` (the fewest pairs of a layer) and ``excluded`` ``(C,)`` (identical or
    non-finite pairs), the same per layer ``layer_pairs``, ``layer_excluded`` ``(C, L)``, and with chunk
    counts their bootstrap replicates ``per_layer_reps``
    ``(B, C, L)`` and ``overall_reps`` ``(B, C)`` (None without)."""

    components: list[str]
    layers: list[str]
    per_layer: np.ndarray
    overall: np.ndarray
    pairs: np.ndarray
    excluded: np.ndarray
    per_layer_reps: np.ndarray | None
    overall_reps: np.ndarray | None
    layer_pairs: np.ndarray | None = None
    layer_excluded: np.ndarray | None = None

    def of_units(self, components, layers) -> tuple[np.ndarray, np.ndarray]:
        """``(U,)`` each unit's plasticity (its component's over every layer, or its layer's; ``layers``:
        each unit's layer index, None for a whole component) and its ``(B, U)`` bootstrap replicates."""
        missing = [c for c in dict.fromkeys(components) if c not in self.components]
        if missing:
            raise ValueError(f"components {missing} were not measured (measured: {self.components})")
        ci = [self.components.index(c) for c in components]
        value = np.array([self.overall[c] if li is None else self.per_layer[c, li]
                          for c, li in zip(ci, layers, strict=True)], dtype=np.float64)
        reps = np.stack([self.overall_reps[:, c] if li is None else self.per_layer_reps[:, c, li]
                         for c, li in zip(ci, layers, strict=True)], axis=-1)
        return value, reps


# layout of the saved chunk statistics along their last axis: the result's first stat_fields (checked
# when measured), read by name below
CHUNK_FIELDS = ("count", "sum", "sumsq", "identical", "nonfinite")


def chunk_result(measured: dict):
    """The ``PlasticityResult`` of saved chunk statistics (each chunk's sums kept): its statistics, and
    the bootstrap replicates over chunks (``replicate_means``), are the kernel package's."""
    import torch

    stats = torch.tensor(measured["stats"], dtype=torch.float64)  # (K, C, L, 5)
    return ChunkedResult(stats, measured["components"], measured["layers"])


def plasticity_samples(measured: dict, chunk_counts: np.ndarray | None = None) -> Plasticity:
    """The plasticity arrays (`Plasticity`) of saved chunk statistics; their bootstrap replicates when
    ``chunk_counts`` ``(B, K)`` is given."""
    res = chunk_result(measured)
    total = res.stats.numpy()  # (C, L, 5)
    count, _, _, identical, nonfinite = np.moveaxis(total, -1, 0)  # each (C, L), in CHUNK_FIELDS' order
    reps = None if chunk_counts is None else [t.numpy() for t in res.replicate_means(chunk_counts)]
    return Plasticity(
        components=list(res.components), layers=list(res.layers),
        per_layer=np.stack([res.mean(c).numpy() for c in res.components]),
        overall=np.array([float(res.overall(c)) for c in res.components]),
        pairs=count.min(-1).astype(np.int64),
        excluded=(identical.sum(-1) + nonfinite.sum(-1)).astype(np.int64),
        per_layer_reps=None if reps is None else reps[0], overall_reps=None if reps is None else reps[1],
        layer_pairs=count.astype(np.int64), layer_excluded=(identical + nonfinite).astype(np.int64))


# ------------------------------------------------------------------------------------------ together
@dataclasses.dataclass(frozen=True)
class Samples:
    """What `claim_samples` computed: the `Accuracy` and `Plasticity` arrays and the counts of the
    resampling units (``seeds``, ``pair_chunks``)."""

    accuracy: Accuracy
    plasticity: Plasticity
    seeds: int
    pair_chunks: int


def claim_samples(measured: dict, summaries: list, *, trains: list[str], ranked: int, lrs: list[float],
                  seeds: list[int], baseline: str, bootstrap: int, seed: int) -> Samples:
    """Every array of one claim's analysis: the seeds' and the chunks' bootstrap multiplicities drawn
    from one generator seeded ``seed`` (in that order), the accuracies of ``trains`` (`accuracy_samples`)
    and the plasticity of the measured chunks (`plasticity_samples`)."""
    summaries = [RunSummary.of(s) for s in summaries]
    rng = np.random.default_rng(seed)
    seed_counts = resample_counts(rng, len(seeds), bootstrap)  # (B, S)
    chunk_counts = resample_counts(rng, int(measured["chunks"]), bootstrap)  # (B, K)
    accuracy = accuracy_samples(summaries, trains, lrs, seeds, ranked=ranked, baseline=baseline,
                                seed_counts=seed_counts)
    return Samples(accuracy, plasticity_samples(measured, chunk_counts), len(seeds), int(measured["chunks"]))
