"""Checks that the golden files of ``tests/vitplast/golden/`` differ from those of a git revision only by
the renamed keys below (and the key names inside recorded strings): every number, string and list is
otherwise the same, to the bit. Run from the repository root:

    python tests/vitplast/golden/check_only_names_changed.py [REVISION]

REVISION: the golden files before the rename (default 0b64857^, the commit before the one that renamed
the keys).

``--apply`` rewrites the golden files from the revision's with the renames (no rerun, so no number can
move), which is how they were re-recorded when ``accuracy_gain`` got its two names.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent
# (golden file, old key, new key): the finetune table's gain at the same lr, the claim's best-lr gain
RENAMES = [
    ("finetune_grid.json", "accuracy_gain_over", "gain_at_lr_over"),
    ("finetune_grid.json", "accuracy_gain", "gain_at_lr"),
    ("claim.json", "accuracy_gain_per_seed", "best_lr_gain_per_seed"),
    ("claim.json", "accuracy_gain", "best_lr_gain"),
    ("claim_two_shards.json", "accuracy_gain_per_seed", "best_lr_gain_per_seed"),
    ("claim_two_shards.json", "accuracy_gain", "best_lr_gain"),
]


def renamed(value, names: dict[str, str]):
    """``value`` with the keys in ``names`` renamed, and the old names inside strings replaced."""
    if isinstance(value, dict):
        return {names.get(k, k): renamed(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, names) for v in value]
    if isinstance(value, str):
        for old, new in names.items():  # longest names first (RENAMES lists them so)
            value = value.replace(old, new)
    return value


def main(argv: list[str]) -> int:
    apply = "--apply" in argv
    args = [a for a in argv if a != "--apply"]
    revision = args[0] if args else "0b64857^"
    bad = 0
    for name in sorted({f for f, _, _ in RENAMES} | {p.name for p in GOLDEN.glob("*.json")}):
        names = {old: new for f, old, new in RENAMES if f == name}
        shown = subprocess.run(["git", "show", f"{revision}:tests/vitplast/golden/{name}"], check=True,
                               capture_output=True, text=True)
        old = json.loads(shown.stdout)
        if apply:
            (GOLDEN / name).write_text(json.dumps(renamed(old, names), indent=1) + "\n")
        new = json.loads((GOLDEN / name).read_text())
        same = renamed(old, names) == new
        changed = ", ".join(f"{o} -> {n}" for o, n in names.items())
        print(f"{name}: " + ("DIFFERS beyond the renames" if not same else
                             f"only the names {changed} changed" if names else "unchanged"))
        bad += not same
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
