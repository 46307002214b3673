"""The report of `vitplast claim`, one for both granularities: the text (the table of the ranked units,
the tests, the criteria, the selection at equal budget, the MHA tests, the learning rates and, last, in
words what the data can and cannot tell); the figure is drawn by `.figure`. A section whose record is
null (a component claim has no within-type test; a layer claim no MHA test) is left out. The pieces of
text are shared with the aggregate's report (`.aggregate`).

The report reads the typed analysis (`.records.ClaimAnalysis`); the figure is drawn by `.figure`.
"""

from __future__ import annotations

import dataclasses
import math

from .records import Budgets, ClaimAnalysis, Correlation, CriterionRow, Interval, PairedTests, Setup


def num(v, fmt: str) -> str:
    """``v`` formatted, ``nan`` when it is None or not finite."""
    return "nan" if v is None or not math.isfinite(v) else format(v, fmt)


def nan(v) -> float:
    """``v``, NaN when None (for a figure)."""
    return math.nan if v is None else v


def _ci(ci, fmt: str) -> str:
    """A (bootstrap) interval: ``[lo, hi]``; ``[x: no spread]`` when it collapses to a point; ``[no
    interval]`` when there is none (fewer than 5 resampling units)."""
    lo, hi = ci
    if lo is None or hi is None:
        return "[no interval]"
    return f"[{num(lo, fmt)}: no spread]" if lo == hi else f"[{num(lo, fmt)}, {num(hi, fmt)}]"


BOUND_WORDS = {"low": "clipped at its lower bound", "high": "clipped at its upper bound",
               "both": "clipped at both bounds"}


def t_ci(d: Interval | dict, fmt: str) -> str:
    """A Student-t interval over seeds, labelled with its n: ``[lo, hi] t n=3``; ``no spread`` when it
    collapses to a point, ``clipped ...`` when cut at what the value can be, ``n=1: no interval``."""
    d = d if isinstance(d, Interval) else Interval(**{"mean": None, **d})
    if None in d.ci:
        return f"(n={d.n}: no interval)" if d.n is not None else "[no interval]"
    clipped = BOUND_WORDS.get(d.clipped)
    return f"{_ci(d.ci, fmt)} {f't n={d.n}' if d.n is not None else 't'}{f', {clipped}' if clipped else ''}"


def mean_ci(d: Interval | None, fmt: str, ci_fmt: str) -> str:
    """``mean [lo, hi] t n=...`` of an interval over seeds ("" without one)."""
    return "" if d is None else f"{num(d.mean, fmt)} {t_ci(d, ci_fmt)}"


P_DEFINITION = ("p-values: one-sided = share of permutations whose statistic is >= the observed one; "
                "two-sided = twice the smaller one-sided p (scipy.stats.permutation_test's definition)")
EDGE_MARK = {"low": "<", "high": ">"}  # the best lr is the grid's smallest / largest


@dataclasses.dataclass(frozen=True)
class Words:
    """How a report names what its claim ranks."""

    question: str
    trained: str  # what each run trains alone
    best_per: str
    noun: str  # a row's label
    note: str = ""


WORDS = {
    "component": Words("Does plasticity before finetuning predict the accuracy gain of finetuning a "
                       "component alone?", "component", "component", "component"),
    "layer": Words("Which (component, layer) to finetune? Plasticity before finetuning vs the gain of "
                   "training one unit alone", "(component, layer)",
                   "unit; < / > = at the grid's low / high edge", "unit",
                   "; each unit's plasticity is its layer's"),
}


def lr_grid(setup: Setup) -> str:
    """The lr grid as run: ``--lr`` values, and with ``--lr auto`` what the widening added."""
    text = ",".join(f"{v:g}" for v in setup.lr)
    run = setup.lrs_run
    if setup.lr_auto:
        text += f" (--lr auto: run at {','.join(f'{v:g}' for v in run)})" if run else " (--lr auto)"
    return text


def _labelled(an: ClaimAnalysis) -> list[tuple[str, object]]:
    """``(label, row)`` of every row with an lr: the ranked units, then the head-only run."""
    out: list[tuple[str, object]] = [(r.unit, r) for r in an.rows]
    return out + ([("head", an.baseline)] if an.baseline.lr is not None else [])


def lr_edge_line(an: ClaimAnalysis) -> str:
    """One line naming the trains whose best lr sits at an edge of the grid they were run at."""
    edges = [f"{name} ({r.lr_edge})" for name, r in _labelled(an) if r.lr_edge]
    if not edges:
        return "learning rates: every best lr is inside the grid"
    return (f"learning rates: the best lr is at the edge of the grid for {', '.join(edges)}: their accuracy "
            "gain may be understated (a clipped lr); widen --lr or use --lr auto")


def lr_position_line(an: ClaimAnalysis) -> str:
    """Where each best lr lies in the grid it was run at: interior, or at its low or high edge."""
    where = {"low": "low edge", "high": "high edge", None: "interior"}
    return "best lr: " + ", ".join(f"{name} {r.lr:.2g} ({where[r.lr_edge]})" for name, r in _labelled(an))


def _row(label, plasticity, params, lr, accuracy, gain) -> str:
    return f"{label:<10} {plasticity:<28} {params:>9} {lr:>7}  {accuracy:<34} {gain}".rstrip()


def _cells(r) -> tuple[str, str, str, str]:
    """A trained row's cells: trainable parameters, lr (``<``/``>`` at the grid's edge), accuracy and
    gain, each with its 95% CI."""
    return (f"{r.trainable_params:,}", f"{r.lr:.2g}{EDGE_MARK.get(r.lr_edge, '')}",
            mean_ci(r.accuracy, ".4f", ".3f"), mean_ci(r.best_lr_gain, "+.4f", "+.3f"))


def setup_lines(s: Setup, an: ClaimAnalysis, words: Words, gain_over: str) -> list[str]:
    """The two lines saying how the claim was run: model and pairs, then the finetuning budget."""
    boot = an.bootstrap
    weights = f" ({s.weights})" if s.weights else ""
    return [
        f"model {s.model}{weights}; plasticity: {s.protocol}, {boot.pairs} matched pairs "
        f"X={s.pretrain_data} / Y={s.data} ({boot.pair_chunks} chunks){words.note}",
        f"finetuning on {s.data}: each {words.trained} alone (+ head), {s.optimizer}, {s.steps} steps, batch "
        f"{s.batch_size}, lr grid {lr_grid(s)} (best per {words.best_per}), seeds "
        f"{','.join(str(v) for v in s.seed)}; {gain_over}",
    ]


def format_report(an: ClaimAnalysis, setup: Setup) -> str:
    """The claim's table, tests, criteria, budgets and what they can and cannot tell, as plain text."""
    words = WORDS[an.granularity]
    base = an.baseline
    over = ("the head-only run (linear probing) of the same seed" if base.train == "head" else
            "the accuracy before finetuning (fresh head)")
    lines = [words.question, *setup_lines(setup, an, words, f"accuracy gain over {over}"), "",
             _row(words.noun, "plasticity [95% CI]", "params", "lr", "accuracy [95% CI]",
                  "accuracy gain [95% CI]")]
    lines.append("-" * len(lines[-1]))
    lines += [_row(r.unit, f"{num(r.plasticity, '.3f')} {_ci(r.plasticity_ci, '.3f')}", *_cells(r))
              for r in an.rows]
    if base.lr is not None:
        lines.append(_row("head", "(baseline)", *_cells(base)[:3], ""))
    lines += [_row(b.train, "(baseline, not ranked)", *_cells(b)) for b in an.baselines]
    lines.append(f"before finetuning: accuracy {mean_ci(base.initial_accuracy, '.4f', '.3f')}")
    lines += ["", f"ranking by plasticity:    {' > '.join(an.ranking.plasticity)}",
              f"ranking by accuracy gain: {' > '.join(an.ranking.best_lr_gain)}"]
    lines += correlation_lines(an)
    lines += disagreement_lines(an.correlations.spearman)
    lines.append(f"({P_DEFINITION})")
    lines.append(f"trend (Theil-Sen): accuracy gain = {num(an.trend.slope, '+.4f')} x plasticity "
                 f"{num(an.trend.intercept, '+.4f')}")
    lines.append(f"verdict: {an.verdict}")
    lines += criteria_lines(an.criteria, within_types=an.within_type is not None)
    lines += relative_gain_lines(an)
    lines += budget_lines(an.budgets)
    lines += mha_test_lines(an.mha_tests)
    lines += [lr_edge_line(an), lr_position_line(an)]
    table = _layer_table(an)
    if table:
        lines += ["", "per-layer plasticity (mean [95% CI]); per layer the claim is plasticity-only: the "
                      "finetune driver trains a component in every block", table]
    lines += ["", "what this can and cannot tell:"] + [f"- {s}" for s in reading(an, setup)]
    return "\n".join(lines)


def correlation_lines(an: ClaimAnalysis) -> list[str]:
    """Plasticity and size against the gain over all units; the partial Spearman; within types."""
    out = [f"over all {len(an.rows)} {WORDS[an.granularity].noun}s:"]
    pairs = ((an.correlations.spearman, an.params_correlations.spearman, "Spearman rho "),
             (an.correlations.kendall, an.params_correlations.kendall, "Kendall tau-b"))
    for c, s, label in pairs:
        kind = f"exact, {c.permutations} permutations" if c.exact else f"{c.permutations} random permutations"
        out.append(f"  plasticity vs accuracy gain: {label} = {num(c.value, '+.3f')}  bootstrap 95% CI "
                   f"{_ci(c.ci, '+.2f')}  permutation p = {num(c.p_greater, '.3g')} (one-sided, > 0), "
                   f"{num(c.p_two_sided, '.3g')} (two-sided; {kind});  trainable parameters vs "
                   f"accuracy gain: {num(s.value, '+.3f')} (p = {num(s.p_greater, '.3g')})")
    pa = an.partial
    out.append(f"controlling for size: partial Spearman {num(pa.spearman, '+.3f')} bootstrap 95% CI "
               f"{_ci(pa.ci, '+.2f')}, p = {num(pa.p_greater, '.3g')} (one-sided, Student-t approximation, "
               "n - 3 df)")
    w = an.within_type
    if w is not None:
        kind = "exact" if w.exact else f"{w.permutations} random permutations"
        out.append(f"within component type (trainable size fixed): pooled Spearman "
                   f"{num(w.pooled_spearman, '+.3f')}, stratified permutation p = "
                   f"{num(w.stratified_p_greater, '.3g')} (one-sided), "
                   f"{num(w.stratified_p_two_sided, '.3g')} (two-sided; gains permuted within types, {kind})")
        out.append("  per type: " + "; ".join(
            f"{c} {num(v.spearman, '+.2f')} {_ci(v.ci, '+.2f')} ({v.units} layers, {v.trainable_params:,} "
            "params)"
            for c, v in w.per_type.items()))
    b = an.bootstrap
    if b.withheld:
        out.append(f"({b.withheld}: the bootstrap needs at least 5 seeds and 5 pair chunks; the permutation "
                   "test stands alone)")
    else:
        out.append(f"(bootstrap: {b.replicates} replicates resampling the {b.seeds} seeds and the "
                   f"{b.pair_chunks} pair chunks; the best lr is chosen again in each)")
    return out


def _layer_table(an: ClaimAnalysis) -> str:
    """Plasticity per layer (mean [95% CI]) of every whole component measured ("" for none)."""
    rows = {r.component: (r.plasticity_per_layer, r.plasticity_per_layer_ci) for r in an.rows
            if r.plasticity_per_layer is not None}
    rows.update({c: (v.per_layer, v.per_layer_ci) for c, v in an.other_measured.items()})
    if not rows:
        return ""
    out = [f"{'layer':>6} " + " ".join(f"{c:>21}" for c in rows)]
    for li, layer in enumerate(an.layers):
        cells = [f"{num(mean[li], '.3f')} {_ci(ci[li], '.3f')}".rjust(21) for mean, ci in rows.values()]
        out.append(f"{layer:>6} " + " ".join(cells))
    return "\n".join(out)


def disagreement_lines(c: Correlation) -> list[str]:
    """When the bootstrap interval and the permutation p point different ways, what each answers."""
    (lo, hi), p = c.ci, c.p_greater
    if lo is None or hi is None or p is None:
        return []
    if (lo > 0) == (p < 0.05):
        return []
    return ["(the bootstrap interval and the permutation p disagree; they answer different questions: the "
            "interval, how much rho would move if the seeds and pairs were drawn again, with these same "
            "units; the permutation p, how often gains unrelated to plasticity would reach this rho. "
            "With few units rho takes a handful of values, so a narrow interval off 0 can sit beside "
            "a large p)"]


def criteria_lines(rows: list[CriterionRow] | None, *, within_types: bool = False) -> list[str]:
    """The criteria against the accuracy gains: one line per criterion (n, Spearman with its bootstrap
    interval, Kendall, one-sided permutation p, partial Spearman on size); ``within_types``: a layer
    claim's rows, pooled within component types with a stratified permutation p."""
    if not rows:
        return []
    head = (f"{'criterion':<11} {'n':>3}  {'Spearman [95% CI]':<28} {'Kendall':>7} {'p (>0)':>8} "
            f"{'partial|size':>12}")
    how = ("Spearman and Kendall pooled within component types across layers; p: one-sided stratified "
           "permutation, gains permuted within types" if within_types else "p: one-sided permutation")
    out = ["", f"criteria vs accuracy gain (higher score = finetune first; {how}; partial: Spearman over all "
           "units with the trainable-parameter count held fixed):", head, "-" * len(head)]
    for r in rows:
        rho = f"{num(r.spearman, '+.3f')} {_ci(r.spearman_ci, '+.2f')}"
        out.append(f"{r.criterion:<11} {r.n:>3}  {rho:<28} {num(r.kendall, '+.3f'):>7} "
                   f"{num(r.p_value, '.3g'):>8} {num(r.partial_size, '+.3f'):>12}")
    return out


def relative_gain_lines(an: ClaimAnalysis) -> list[str]:
    """The paper's relative gain of each row, and the same with the lr chosen on held-out data."""
    rows = [(r.unit, r) for r in an.rows] + [(b.train, b) for b in an.baselines]
    if not rows:
        return []
    out = ["relative_gain (the paper's, lr chosen on the test accuracy): "
           + ", ".join(f"{n} {num(r.relative_gain, '+.3f')}" for n, r in rows)]
    if any(r.relative_gain_validated is not None for _, r in rows):
        out.append("relative_gain, lr chosen on held-out validation data: " + ", ".join(
            f"{n} {num(r.relative_gain_validated, '+.3f')}" for n, r in rows))
    else:
        out.append("relative_gain with the lr chosen on held-out validation data: not available (the runs "
                   "hold no held-out validation accuracy)")
    return out


def budget_lines(budgets: Budgets | None) -> list[str]:
    """Per budget, each criterion's set with its relative gain and random percentile, the random sets'
    count and spread, and full finetuning's relative gain as the reference."""
    if budgets is None or not budgets.rows:
        return []
    besides = " besides the head" if budgets.unit == "parameters" else ""
    out = ["", f"selection at equal budget (budget: {budgets.unit}{besides}; relative_gain as above; "
           "percentile among the random sets of the budget, ties counted half; full finetuning: "
           f"relative_gain {num(budgets.full.relative_gain, '+.3f')}):"]
    head = f"{'budget':>10}  {'criterion':<11} {'relative_gain':>13} {'percentile':>10} {'params':>9}  set"
    out += [head, "-" * len(head)]
    for s in budgets.budgets:
        for r in (r for r in budgets.rows if r.budget == s.budget):
            pct = "-" if r.random_percentile is None else f"{r.random_percentile:.0f}"
            params = "-" if r.trainable_params is None else f"{r.trainable_params:,}"
            out.append(f"{s.budget:>10,}  {r.criterion:<11} {num(r.relative_gain, '+.3f'):>13} {pct:>10} "
                       f"{params:>9}  {r.train or '(not defined at this budget)'}")
        q = s.random_relative_gain
        how = "every set" if s.enumerated else "random draws"
        out.append(f"{s.budget:>10,}  {'random':<11} {s.random_sets} sets ({how}): min "
                   f"{num(q.min, '+.3f')}, median {num(q.median, '+.3f')}, max {num(q.max, '+.3f')}")
    if budgets.lora:
        out.append(f"(params: trainable parameters of the run, the head's included; lora: {budgets.lora})")
    return out


def mha_test_lines(tests: PairedTests | None) -> list[str]:
    """MHA against each other component: paired t and one-sided Wilcoxon, Holm-corrected, with n."""
    if tests is None:
        return []
    out = [f"{tests.reference} vs each other component (accuracy at each one's best lr; paired over "
           "(dataset, seed); Holm-corrected):"]
    out += [f"  vs {c:<6} n = {r.n}, mean difference {num(r.mean_difference, '+.4f')}, paired t p = "
            f"{num(r.t_p_holm, '.3g')}, Wilcoxon (one-sided) p = {num(r.wilcoxon_p_holm, '.3g')}"
            for c, r in tests.comparisons.items()]
    ns = sorted({r.n for r in tests.comparisons.values() if r.n})
    if ns:
        floors = ", ".join(f"{0.5 ** n:.3g} with n = {n}" for n in ns)
        out.append(f"  (the smallest one-sided Wilcoxon p the n allows, before Holm's correction: {floors}; "
                   "n >= 5 pairs are needed for it to reach 0.05)")
    return out


def reading(an: ClaimAnalysis, setup: Setup) -> list[str]:
    """Plain sentences on what the numbers support, computed from them."""
    out = []
    w, sp, sz, pa = an.within_type, an.correlations.spearman, an.params_correlations.spearman, an.partial
    if w is not None:
        p_w, rho_w = w.stratified_p_greater, w.pooled_spearman
        if p_w is not None and rho_w is not None and p_w < 0.05 and rho_w > 0:
            out.append(f"Within component types, where every unit has the same size, the more plastic layers "
                       f"gained more (pooled rho {rho_w:+.2f}, stratified p = {p_w:.3g}): plasticity carries "
                       "information that size cannot.")
        else:
            out.append("Within component types, where size is fixed, a link between a layer's plasticity "
                       f"and its gain is not established (pooled rho {num(rho_w, '+.2f')}, stratified p = "
                       f"{num(p_w, '.3g')}): the data cannot separate plasticity from size.")
    if sp.value is not None and sz.value is not None:
        which = "size" if abs(sz.value) > abs(sp.value) else "plasticity"
        out.append(f"Over all units, plasticity vs gain rho {sp.value:+.2f} and size vs gain rho "
                   f"{sz.value:+.2f}: {which} ranks the gains better here; with size held fixed the "
                   f"partial rho is {num(pa.spearman, '+.2f')} {_ci(pa.ci, '+.2f')}.")
    out.append(f"Gains rest on {len(setup.seed)} seed(s) and {setup.steps} steps on one downstream task: "
               "a unit's gain interval is wide, and small differences between units are within noise; the "
               "bootstrap over so few seeds understates that uncertainty.")
    if an.lr_edges:
        out.append(f"{len(an.lr_edges)} train(s) have their best lr at a grid edge; their gains may be "
                   "underestimated.")
    out.append("Plasticity is measured before finetuning on this model only; it says nothing about other "
               "models, tasks or training lengths.")
    return out
