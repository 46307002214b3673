"""Reports of `vitplast claim`: the pieces of text every report shares (numbers and intervals, the
setup lines, the criteria, the selection at equal budget, the MHA tests, the learning rates), the
component claim's text table and its figure (gain against plasticity). The layer claim's report
(`.layer_report`) and the aggregate's (`.aggregate`) are made of the same pieces.

The figure is drawn on a bare ``matplotlib.figure.Figure`` with the Agg canvas (no pyplot, so no
global figure state is created or left behind), with each component in its one colour
(`vitplast.outputs.plots.component_color`), and written atomically. Gains get error bars only
where there are at least two seeds.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..outputs.plots import component_color, figure, legend_outside, save


def _num(v, fmt: str) -> str:
    return "nan" if v is None or not math.isfinite(v) else format(v, fmt)


def _ci(ci, fmt: str) -> str:
    """A (bootstrap) interval: ``[lo, hi]``; ``[x: no spread]`` when it collapses to a point; ``[no
    interval]`` when there is none (fewer than 5 resampling units)."""
    lo, hi = ci
    if lo is None or hi is None:
        return "[no interval]"
    if lo == hi:
        return f"[{_num(lo, fmt)}: no spread]"
    return f"[{_num(lo, fmt)}, {_num(hi, fmt)}]"


BOUND_WORDS = {"low": "clipped at its lower bound", "high": "clipped at its upper bound",
               "both": "clipped at both bounds"}


def t_ci(d: dict, fmt: str) -> str:
    """A Student-t interval over seeds, labelled with its n: ``[lo, hi] t n=3``; ``no spread`` when it
    collapses to a point, ``clipped ...`` when cut at what the value can be, ``n=1: no interval``."""
    n = d.get("n")
    label = f"t n={n}" if n is not None else "t"
    lo, hi = d["ci"]
    if lo is None or hi is None:
        return f"(n={n}: no interval)" if n is not None else "[no interval]"
    text = f"[{_num(lo, fmt)}: no spread]" if lo == hi else f"[{_num(lo, fmt)}, {_num(hi, fmt)}]"
    clipped = BOUND_WORDS.get(d.get("clipped"))
    return f"{text} {label}{f', {clipped}' if clipped else ''}"


P_DEFINITION = ("p-values: one-sided = share of permutations whose statistic is >= the observed one; "
                "two-sided = twice the smaller one-sided p (scipy.stats.permutation_test's definition)")
EDGE_MARK = {"low": "<", "high": ">"}  # the best lr is the grid's smallest / largest


def lr_grid(result: dict) -> str:
    """The lr grid as run: ``--lr`` values, and with ``--lr auto`` what the widening added."""
    record = result["config"]
    text = ",".join(f"{v:g}" for v in record["lr"])
    run = result.get("plan", {}).get("lrs_run")
    if record.get("lr_auto"):
        text += f" (--lr auto: run at {','.join(f'{v:g}' for v in run)})" if run else " (--lr auto)"
    return text


def lr_edge_line(rows: list[dict], base: dict, key: str) -> str:
    """One line naming the trains whose best lr sits at an edge of the grid they were run at."""
    edges = [f"{r[key]} ({r['lr_edge']})" for r in rows if r.get("lr_edge")]
    edges += [f"head ({base['lr_edge']})"] if base.get("lr_edge") else []
    if not edges:
        return "learning rates: every best lr is inside the grid"
    return (f"learning rates: the best lr is at the edge of the grid for {', '.join(edges)}: their accuracy "
            "gain may be understated (a clipped lr); widen --lr or use --lr auto")


def edge_mark(edge: str | None) -> str:
    """``<`` / ``>`` when the best lr sits at the grid's low / high edge, else nothing."""
    return EDGE_MARK.get(edge, "")


def result_cells(r: dict) -> tuple[str, str, str, str, str]:
    """A table row's cells: plasticity, trainable parameters, lr (``<``/``>`` at the grid's edge),
    accuracy and gain, each with its 95% CI."""
    return (f"{_num(r['plasticity'], '.3f')} {_ci(r['plasticity_ci'], '.3f')}", f"{r['trainable_params']:,}",
            f"{r['lr']:.2g}{edge_mark(r.get('lr_edge'))}",
            f"{_num(r['accuracy']['mean'], '.4f')} {t_ci(r['accuracy'], '.3f')}",
            f"{_num(r['accuracy_gain']['mean'], '+.4f')} {t_ci(r['accuracy_gain'], '+.3f')}")


def baseline_cells(b: dict) -> tuple[str, str, str, str]:
    """A baseline row's cells (full, lora): trainable parameters, lr, accuracy and gain with CIs."""
    return (f"{b['trainable_params']:,}", f"{b['lr']:.2g}{edge_mark(b.get('lr_edge'))}",
            f"{_num(b['accuracy']['mean'], '.4f')} {t_ci(b['accuracy'], '.3f')}",
            f"{_num(b['accuracy_gain']['mean'], '+.4f')} {t_ci(b['accuracy_gain'], '+.3f')}")


def _row(component, plasticity, params, lr, accuracy, gain) -> str:
    return (f"{component:<10} {plasticity:<28} {params:>9} {lr:>7}  {accuracy:<34} {gain}").rstrip()


def setup_lines(result: dict, trained: str, best_per: str, gain_over: str, note: str = "") -> list[str]:
    """The two lines saying how the claim was run: model and pairs, then the finetuning budget."""
    record, an = result["config"], result["analysis"]
    weights = f" ({record['weights']})" if record["weights"] else ""
    return [
        f"model {record['model']}{weights}; plasticity: {record['protocol']}, {an['bootstrap']['pairs']} "
        f"matched pairs X={record['pretrain_data']} / Y={record['data']} ({an['bootstrap']['pair_chunks']} "
        f"chunks){note}",
        f"finetuning on {record['data']}: each {trained} alone (+ head), {record['optimizer']}, "
        f"{record['steps']} steps, batch {record['batch_size']}, lr grid {lr_grid(result)} (best per "
        f"{best_per}), seeds {','.join(str(s) for s in record['seed'])}; {gain_over}",
    ]


def format_report(result: dict) -> str:
    """The claim's table, correlations, verdict and per-layer plasticity as plain text."""
    an = result["analysis"]
    base = an["baseline"]
    over = ("the head-only run (linear probing) of the same seed" if base["train"] == "head" else
            "the accuracy before finetuning (fresh head)")
    lines = [
        "Does plasticity before finetuning predict the accuracy gain of finetuning a component alone?",
        *setup_lines(result, "component", "component", f"accuracy gain over {over}"),
        "",
        _row("component", "plasticity [95% CI]", "params", "lr", "accuracy [95% CI]",
             "accuracy gain [95% CI]"),
    ]
    lines.append("-" * len(lines[-1]))
    for r in an["rows"]:
        lines.append(_row(r["component"], *result_cells(r)))
    if base["train"] == "head":
        acc = f"{_num(base['accuracy']['mean'], '.4f')} {t_ci(base['accuracy'], '.3f')}"
        params = f"{base['trainable_params']:,}"
        lr = f"{base['lr']:.2g}{edge_mark(base.get('lr_edge'))}"
        lines.append(_row("head", "(baseline)", params, lr, acc, ""))
    lines += [_row(b["train"], "(baseline, not ranked)", *baseline_cells(b)) for b in an.get("baselines", [])]
    ia = base["initial_accuracy"]
    lines.append(f"before finetuning: accuracy {_num(ia['mean'], '.4f')} {t_ci(ia, '.3f')}")
    lines += [
        "",
        "ranking by plasticity:    " + " > ".join(an["ranking"]["plasticity"]),
        "ranking by accuracy gain: " + " > ".join(an["ranking"]["accuracy_gain"]),
    ]
    for name, label in (("spearman", "Spearman rho "), ("kendall", "Kendall tau-b")):
        c = an["correlations"][name]
        kind = (f"exact, {c['permutations']} permutations" if c["exact"] else
                f"{c['permutations']} random permutations")
        lines.append(f"{label} = {_num(c['value'], '+.3f')}  bootstrap 95% CI {_ci(c['ci'], '+.2f')}  "
                     f"permutation p = {_num(c['p_greater'], '.3g')} (one-sided, > 0), "
                     f"{_num(c['p_two_sided'], '.3g')} (two-sided; {kind})")
    pc = an["params_correlations"]
    sp, kd = pc["spearman"], pc["kendall"]
    lines.append(f"for comparison, trainable parameters vs accuracy gain: Spearman "
                 f"{_num(sp['value'], '+.3f')} "
                 f"(p = {_num(sp['p_greater'], '.3g')}), Kendall {_num(kd['value'], '+.3f')} "
                 f"(p = {_num(kd['p_greater'], '.3g')})")
    b = an["bootstrap"]
    if b.get("withheld"):
        lines.append(f"({b['withheld']}: the bootstrap needs at least 5 seeds and 5 pair chunks; the "
                     "permutation test stands alone)")
    else:
        lines.append(f"(bootstrap: {b['replicates']} replicates resampling the {b['seeds']} seeds and the "
                     f"{b['pair_chunks']} pair chunks; the best lr is chosen again in each)")
    lines += disagreement_lines(an["correlations"]["spearman"])
    lines.append(f"({P_DEFINITION})")
    t = an["trend"]
    lines.append(f"trend (Theil-Sen): accuracy gain = {_num(t['slope'], '+.4f')} x plasticity "
                 f"{_num(t['intercept'], '+.4f')}")
    lines.append(f"verdict: {an['verdict']}")
    lines += criteria_lines(an.get("criteria"))
    lines += relative_gain_lines(an, "component")
    lines += budget_lines(an.get("budgets"))
    lines += mha_test_lines(an.get("mha_tests"))
    lines.append(lr_edge_line(an["rows"], base, "component"))
    lines.append(lr_position_line(an["rows"], base, "component"))
    lines += ["", "per-layer plasticity (mean [95% CI]); per layer the claim is plasticity-only: the "
                  "finetune driver trains a component in every block", _layer_table(an)]
    return "\n".join(lines)


def _layer_table(an: dict) -> str:
    rows = {r["component"]: (r["plasticity_per_layer"], r["plasticity_per_layer_ci"]) for r in an["rows"]}
    rows.update({c: (v["per_layer"], v["per_layer_ci"]) for c, v in an["other_measured"].items()})
    names = list(rows)
    head = f"{'layer':>6} " + " ".join(f"{c:>21}" for c in names)
    out = [head]
    for li, layer in enumerate(an["layers"]):
        cells = []
        for c in names:
            mean, ci = rows[c][0][li], rows[c][1][li]
            cells.append(f"{_num(mean, '.3f')} {_ci(ci, '.3f')}".rjust(21))
        out.append(f"{layer:>6} " + " ".join(cells))
    return "\n".join(out)


def disagreement_lines(c: dict) -> list[str]:
    """When the bootstrap interval and the permutation p point different ways, what each answers."""
    lo, hi, p = c["ci"][0], c["ci"][1], c["p_greater"]
    if lo is None or hi is None or p is None:
        return []
    if (lo > 0) == (p < 0.05):
        return []
    return ["(the bootstrap interval and the permutation p disagree; they answer different questions: the "
            "interval, how much rho would move if the seeds and pairs were drawn again, with these same "
            "components; the permutation p, how often gains unrelated to plasticity would reach this rho. "
            "With few components rho takes a handful of values, so a narrow interval off 0 can sit beside "
            "a large p)"]


def criteria_lines(rows: list[dict] | None, *, within_types: bool = False) -> list[str]:
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
        rho = f"{_num(r['spearman'], '+.3f')} {_ci(r['spearman_ci'], '+.2f')}"
        out.append(f"{r['criterion']:<11} {r['n']:>3}  {rho:<28} {_num(r['kendall'], '+.3f'):>7} "
                   f"{_num(r['p_value'], '.3g'):>8} {_num(r['partial_size'], '+.3f'):>12}")
    return out


def relative_gain_lines(an: dict, key: str) -> list[str]:
    """The paper's relative gain of each row, and the same with the lr chosen on held-out data."""
    rows = [r for r in an["rows"] if "relative_gain" in r] + [b for b in an.get("baselines", [])
                                                             if "relative_gain" in b]
    if not rows:
        return []
    name = [r.get(key, r.get("train")) for r in rows]
    out = ["relative_gain (the paper's, lr chosen on the test accuracy): "
           + ", ".join(f"{n} {_num(r['relative_gain'], '+.3f')}" for n, r in zip(name, rows, strict=True))]
    if any(r.get("relative_gain_validated") is not None for r in rows):
        out.append("relative_gain, lr chosen on held-out validation data: " + ", ".join(
            f"{n} {_num(r['relative_gain_validated'], '+.3f')}" for n, r in zip(name, rows, strict=True)))
    else:
        out.append("relative_gain with the lr chosen on held-out validation data: not available (the runs "
                   "hold no held-out validation accuracy)")
    return out


def budget_lines(budgets: dict | None) -> list[str]:
    """Per budget, each criterion's set with its relative gain and random percentile, the random sets'
    count and spread, and full finetuning's relative gain as the reference."""
    if not budgets or not budgets.get("rows"):
        return []
    unit = budgets["unit"]
    full = budgets["full"]["relative_gain"]
    besides = " besides the head" if unit == "parameters" else ""
    out = ["", f"selection at equal budget (budget: {unit}{besides}"
           f"; relative_gain as above; percentile among the random sets of the budget, ties counted half; "
           f"full finetuning: relative_gain {_num(full, '+.3f')}):"]
    head = f"{'budget':>10}  {'criterion':<11} {'relative_gain':>13} {'percentile':>10}  set"
    out += [head, "-" * len(head)]
    spread = {b["budget"]: b for b in budgets["budgets"]}
    for b, row in _by_budget(budgets["rows"]).items():
        for r in row:
            pct = "-" if r["random_percentile"] is None else f"{r['random_percentile']:.0f}"
            out.append(f"{b:>10,}  {r['criterion']:<11} {_num(r['relative_gain'], '+.3f'):>13} {pct:>10}  "
                       f"{r['train'] or '(not defined at this budget)'}")
        s = spread[b]
        q = s["random_relative_gain"]
        how = "every set" if s["enumerated"] else "random draws"
        out.append(f"{b:>10,}  {'random':<11} {s['random_sets']} sets ({how}): min {_num(q['min'], '+.3f')}, "
                   f"median {_num(q['median'], '+.3f')}, max {_num(q['max'], '+.3f')}")
    return out


def _by_budget(rows: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in rows:
        out.setdefault(r["budget"], []).append(r)
    return out


def mha_test_lines(tests: dict | None) -> list[str]:
    """MHA against each other component: paired t and one-sided Wilcoxon, Holm-corrected, with n."""
    if not tests:
        return []
    out = [f"{tests['reference']} vs each other component (accuracy at each one's best lr; paired over "
           "(dataset, seed); Holm-corrected):"]
    for c, r in tests["comparisons"].items():
        out.append(f"  vs {c:<6} n = {r['n']}, mean difference {_num(r['mean_difference'], '+.4f')}, "
                   f"paired t p = {_num(r['t_p_holm'], '.3g')}, Wilcoxon (one-sided) p = "
                   f"{_num(r['wilcoxon_p_holm'], '.3g')}")
    return out


def lr_position_line(rows: list[dict], base: dict, key: str) -> str:
    """Where each best lr lies in the grid it was run at: interior, or at its low or high edge."""
    where = {"low": "low edge", "high": "high edge", None: "interior"}
    items = [f"{r[key]} {r['lr']:.2g} ({where[r.get('lr_edge')]})" for r in rows]
    if "lr" in base:
        items.append(f"head {base['lr']:.2g} ({where[base.get('lr_edge')]})")
    return "best lr: " + ", ".join(items)


def gain_interval(result: dict) -> str:
    """What the gain's error bars are: the 95% t interval over seeds, or none with a single seed."""
    seeds = len(result["config"]["seed"])
    return "95% t CI over seeds" if seeds >= 2 else "n = 1 seed: no interval"


def plot_claim(result: dict, path) -> Path:
    """Gain against plasticity (one point per component, 95% error bars both ways, Theil-Sen trend)
    beside plasticity per layer (mean and 95% band per component) -> PNG at ``path``."""
    an = result["analysis"]
    rows = an["rows"]
    fig, axes = figure(1, 2, (12, 4.8), gridspec_kw={"width_ratios": [1.15, 1]})
    ax, ax2 = axes[0]
    points = [r for r in rows if r["plasticity"] is not None and r["accuracy_gain"]["mean"] is not None]
    for r in points:
        x, (xlo, xhi) = r["plasticity"], r["plasticity_ci"]
        y, (ylo, yhi) = r["accuracy_gain"]["mean"], r["accuracy_gain"]["ci"]
        xerr = None if xlo is None or xhi is None else [[max(0.0, x - xlo)], [max(0.0, xhi - x)]]
        yerr = None if ylo is None or yhi is None else [[max(0.0, y - ylo)], [max(0.0, yhi - y)]]
        ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="o", color=component_color(r["component"]),
                    capsize=3, ms=7, label=f"{r['component']} ({r['trainable_params']:,} params)")
        ax.annotate(r["component"], (x, y), textcoords="offset points", xytext=(6, 6), fontsize=10)
    slope, intercept = an["trend"]["slope"], an["trend"]["intercept"]
    xs = [r["plasticity"] for r in points]
    if slope is not None and intercept is not None and xs:
        pad = 0.05 * (max(xs) - min(xs) or 1.0)
        x0, x1 = min(xs) - pad, max(xs) + pad
        ax.plot([x0, x1], [slope * x0 + intercept, slope * x1 + intercept], "--", color="0.4",
                label=f"Theil-Sen trend (slope {slope:+.3g})")
    ax.axhline(0.0, color="0.75", lw=0.8)
    sp, kd = an["correlations"]["spearman"], an["correlations"]["kendall"]
    ax.set_title(f"Spearman ρ = {_num(sp['value'], '+.2f')} {_ci(sp['ci'], '+.2f')}, "
                 f"p = {_num(sp['p_greater'], '.2g')};  Kendall τ = {_num(kd['value'], '+.2f')}, "
                 f"p = {_num(kd['p_greater'], '.2g')}", fontsize=10)
    base = "head-only run" if an["baseline"]["train"] == "head" else "before finetuning"
    ax.set_xlabel(f"plasticity before finetuning ({result['config']['protocol']}, 95% bootstrap CI)")
    ax.set_ylabel(f"accuracy gain over {base} ({gain_interval(result)})")
    legend_outside(ax)
    ax.grid(alpha=0.3)

    layers = list(range(len(an["layers"])))
    series = [(r["component"], r["plasticity_per_layer"], r["plasticity_per_layer_ci"]) for r in rows]
    series += [(c, v["per_layer"], v["per_layer_ci"]) for c, v in an["other_measured"].items()]
    for c, mean, ci in series:
        color = component_color(c)
        m = [math.nan if v is None else v for v in mean]
        ax2.plot(layers, m, "o-", color=color, label=c)
        lo = [math.nan if v[0] is None else v[0] for v in ci]
        hi = [math.nan if v[1] is None else v[1] for v in ci]
        ax2.fill_between(layers, lo, hi, color=color, alpha=0.2)
    ax2.axhline(1.0, color="0.75", lw=0.8)
    ax2.set_xticks(layers, an["layers"])
    ax2.set_xlabel("layer (block)")
    ax2.set_ylabel("plasticity")
    ax2.set_title("plasticity per layer (per layer the claim is plasticity-only)", fontsize=10)
    legend_outside(ax2)
    ax2.grid(alpha=0.3)
    return save(fig, path)
