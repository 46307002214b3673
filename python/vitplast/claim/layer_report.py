"""Reports of `vitplast claim --granularity layer`: the text (table, statistics, the selection at equal
budget of `.budget_report`, and in words what the data can and cannot tell) and the figure (gain
against plasticity per unit, coloured by component; plasticity and gain per layer).

Drawn in the commands' one plotting style (`vitplast.outputs.plots`: no global pyplot state,
one colour per component, written atomically); gains get error bars only with at least two seeds."""

from __future__ import annotations

import math
from pathlib import Path

from ..finetune import TRAIN_ORDER
from ..outputs.plots import component_color, figure, legend_outside, save
from .report import (
    P_DEFINITION,
    _ci,
    _num,
    budget_lines,
    criteria_lines,
    disagreement_lines,
    edge_mark,
    gain_interval,
    lr_edge_line,
    lr_position_line,
    result_cells,
    setup_lines,
    t_ci,
)


def _row(unit, plasticity, params, lr, accuracy, gain) -> str:
    return f"{unit:<8} {plasticity:<22} {params:>9} {lr:>8}  {accuracy:<22} {gain}".rstrip()


def format_layer_report(result: dict) -> str:
    """The layer claim's table, statistics, criteria, budgets and, last, what they can and cannot tell
    (`reading`), as plain text."""
    record, an = result["config"], result["analysis"]
    base = an["baseline"]
    sentences = reading(an, record)
    lines = [
        "Which (component, layer) to finetune? Plasticity before finetuning vs the gain of training one "
        "unit alone",
        *setup_lines(result, "(component, layer)", "unit; < / > = at the grid's low / high edge",
                     "accuracy gain over the head-only run of the same seed",
                     note="; each unit's plasticity is its layer's"),
        "",
        _row("unit", "plasticity [95% CI]", "params", "lr", "accuracy [95% CI]", "accuracy gain [95% CI]"),
    ]
    lines.append("-" * len(lines[-1]))
    for r in an["rows"]:
        lines.append(_row(r["unit"], *result_cells(r)))
    lines.append(_row("head", "(baseline)", f"{base['trainable_params']:,}",
                      f"{base['lr']:.2g}{edge_mark(base['lr_edge'])}",
                      f"{_num(base['accuracy']['mean'], '.4f')} {t_ci(base['accuracy'], '.3f')}", ""))
    ia = base["initial_accuracy"]
    lines += [f"before finetuning: accuracy {_num(ia['mean'], '.4f')} {t_ci(ia, '.3f')}", ""]
    n = len(an["rows"])
    lines.append(f"over all {n} units:")
    for name, label in (("spearman", "Spearman rho "), ("kendall", "Kendall tau-b")):
        c, s = an["correlations"][name], an["params_correlations"][name]
        lines.append(f"  plasticity vs accuracy gain: {label} = {_num(c['value'], '+.3f')}  bootstrap 95% CI "
                     f"{_ci(c['ci'], '+.2f')}  p = {_num(c['p_greater'], '.3g')} (one-sided), "
                     f"{_num(c['p_two_sided'], '.3g')} (two-sided);  size vs accuracy gain: "
                     f"{_num(s['value'], '+.3f')} "
                     f"(p = {_num(s['p_greater'], '.3g')})")
    w = an["within_type"]
    kind = "exact" if w["exact"] else f"{w['permutations']} random permutations"
    lines.append(f"within component type (trainable size fixed): pooled Spearman "
                 f"{_num(w['pooled_spearman'], '+.3f')}, stratified permutation p = "
                 f"{_num(w['stratified_p_greater'], '.3g')} (one-sided), "
                 f"{_num(w['stratified_p_two_sided'], '.3g')} (two-sided; gains permuted within types, "
                 f"{kind})")
    lines.append("  per type: " + "; ".join(
        f"{c} {_num(v['spearman'], '+.2f')} {_ci(v['ci'], '+.2f')} ({v['units']} layers, "
        f"{v['trainable_params']:,} params)" for c, v in w["per_type"].items()))
    pa = an["partial"]
    lines.append(f"controlling for size: partial Spearman {_num(pa['spearman'], '+.3f')} bootstrap 95% CI "
                 f"{_ci(pa['ci'], '+.2f')}, p = {_num(pa['p_greater'], '.3g')} (one-sided, Student-t "
                 f"approximation, n - 3 df)")
    t = an["trend"]
    lines.append(f"trend (Theil-Sen): accuracy gain = {_num(t['slope'], '+.4f')} x plasticity "
                 f"{_num(t['intercept'], '+.4f')}")
    b = an["bootstrap"]
    if b.get("withheld"):
        lines.append(f"({b['withheld']}: the bootstrap needs at least 5 seeds and 5 pair chunks; "
                     f"{P_DEFINITION})")
    else:
        lines.append(f"(bootstrap: {b['replicates']} replicates resampling the {b['seeds']} seeds and the "
                     f"{b['pair_chunks']} pair chunks, the best lr chosen again in each; {P_DEFINITION})")
    lines += disagreement_lines(an["correlations"]["spearman"])
    lines.append(lr_position_line(an["rows"], an["baseline"], "unit"))
    lines += criteria_lines(an.get("criteria"), within_types=True)
    lines += budget_lines(an.get("budgets"))
    lines += ["", lr_edge_line(an["rows"], base, "unit")]
    lines += ["", "what this can and cannot tell:"] + [f"- {s}" for s in sentences]
    return "\n".join(lines)


def reading(an: dict, record: dict) -> list[str]:
    """Plain sentences on what the numbers support, computed from them."""
    out = []
    sp, sz = an["correlations"]["spearman"], an["params_correlations"]["spearman"]
    w, pa = an["within_type"], an["partial"]
    p_w, rho_w = w["stratified_p_greater"], w["pooled_spearman"]
    if p_w is not None and rho_w is not None and p_w < 0.05 and rho_w > 0:
        out.append(f"Within component types, where every unit has the same size, the more plastic layers "
                   f"gained more (pooled rho {rho_w:+.2f}, stratified p = {p_w:.3g}): plasticity carries "
                   "information that size cannot.")
    else:
        out.append(f"Within component types, where size is fixed, a link between a layer's plasticity and "
                   f"its gain is not established (pooled rho {_num(rho_w, '+.2f')}, stratified p = "
                   f"{_num(p_w, '.3g')}): the data cannot separate plasticity from size.")
    if sp["value"] is not None and sz["value"] is not None:
        which = "size" if abs(sz["value"]) > abs(sp["value"]) else "plasticity"
        out.append(f"Over all units, plasticity vs gain rho {sp['value']:+.2f} and size vs gain rho "
                   f"{sz['value']:+.2f}: {which} ranks the gains better here; with size held fixed the "
                   f"partial rho is {_num(pa['spearman'], '+.2f')} {_ci(pa['ci'], '+.2f')}.")
    n_seeds = len(record["seed"])
    out.append(f"Gains rest on {n_seeds} seed(s) and {record['steps']} steps on one downstream task: a "
               "unit's gain interval is wide, and small differences between units are within noise; "
               "the bootstrap over so few seeds understates that uncertainty.")
    if an["lr_edges"]:
        out.append(f"{len(an['lr_edges'])} train(s) have their best lr at a grid edge; their gains may be "
                   "underestimated.")
    out.append("Plasticity is measured before finetuning on this model only; it says nothing about "
               "other models, tasks or training lengths.")
    return out


def plot_layer_claim(result: dict, path) -> Path:
    """Gain vs plasticity (one point per unit, coloured by component, 95% error bars both ways);
    plasticity and gain per layer -> PNG at ``path``."""
    an = result["analysis"]
    rows = an["rows"]
    fig, axes = figure(3, 1, (8, 13))
    ax, ax_p, ax_g = axes[:, 0]
    seen = dict.fromkeys(r["component"] for r in rows)
    names = list(TRAIN_ORDER) + [c for c in seen if c not in TRAIN_ORDER]
    colors = {c: component_color(c) for c in names}
    seen = set()
    for r in rows:
        x, (xlo, xhi) = r["plasticity"], r["plasticity_ci"]
        y, (ylo, yhi) = r["accuracy_gain"]["mean"], r["accuracy_gain"]["ci"]
        if x is None or y is None:
            continue
        xerr = None if xlo is None or xhi is None else [[max(0.0, x - xlo)], [max(0.0, xhi - x)]]
        yerr = None if ylo is None or yhi is None else [[max(0.0, y - ylo)], [max(0.0, yhi - y)]]
        c = r["component"]
        ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="o", color=colors[c], capsize=2, ms=6, alpha=0.85,
                    label=None if c in seen else f"{c} ({r['trainable_params']:,} params)")
        seen.add(c)
        ax.annotate(str(r["layer"]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.axhline(0.0, color="0.75", lw=0.8)
    sp, w = an["correlations"]["spearman"], an["within_type"]
    ax.set_title(f"all units: Spearman {_num(sp['value'], '+.2f')} (p {_num(sp['p_greater'], '.2g')}); "
                 f"within types {_num(w['pooled_spearman'], '+.2f')} "
                 f"(p {_num(w['stratified_p_greater'], '.2g')})",
                 fontsize=10)
    ax.set_xlabel("plasticity of the unit's layer before finetuning (95% bootstrap CI); labels: layer")
    ax.set_ylabel(f"accuracy gain over head-only ({gain_interval(result)})")
    legend_outside(ax)
    ax.grid(alpha=0.3)

    layers = an["layers"]
    for c in names:
        rs = sorted((r for r in rows if r["component"] == c), key=lambda r: r["layer_index"])
        if not rs:
            continue
        xs = [r["layer_index"] for r in rs]
        for axis, key in ((ax_p, "plasticity"), (ax_g, "accuracy_gain")):
            mean = [_nan(r[key] if key == "plasticity" else r[key]["mean"]) for r in rs]
            ci = [r["plasticity_ci"] if key == "plasticity" else r[key]["ci"] for r in rs]
            axis.plot(xs, mean, "o-", color=colors[c], label=c)
            axis.fill_between(xs, [_nan(v[0]) for v in ci], [_nan(v[1]) for v in ci], color=colors[c],
                              alpha=0.15)
    for axis, label in ((ax_p, "plasticity (95% CI)"), (ax_g, "accuracy gain over head-only (95% CI)")):
        axis.set_xticks(range(len(layers)), layers)
        axis.set_xlabel("layer (block)")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        legend_outside(axis)
    ax_p.axhline(1.0, color="0.75", lw=0.8)
    ax_g.axhline(0.0, color="0.75", lw=0.8)
    ax_p.set_title("plasticity per layer", fontsize=10)
    ax_g.set_title("accuracy gain per layer (each unit trained alone)", fontsize=10)
    return save(fig, path, dpi=100)


def _nan(v):
    return math.nan if v is None else v
