"""Compares the golden files of ``tests/vitplast/golden/`` with those of a git revision the way the golden
test does: per file, the machines they were recorded on, how many values differ at all (to the bit) and
how many differ beyond the test's cross-machine tolerances. Run from the repository root:

    python tests/vitplast/golden/compare_recordings.py REVISION

Used when the files are recorded again on another machine or after a change meant to move numbers a
little (Fisher's one-pass per-sample gradients): every difference must be within the tolerances.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent
ROOT = GOLDEN.parents[2]
NAMES = ["measure_demo", "finetune_one", "finetune_grid", "claim", "claim_two_shards"]


def main(revision: str) -> int:
    sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests")]
    import vitplast.models.digits  # noqa: F401  (the real package first: tests/vitplast shares its name)

    sys.path.insert(2, str(GOLDEN.parent))
    import test_golden_outputs as golden

    beyond = 0
    for name in NAMES:
        rel = GOLDEN.relative_to(ROOT) / f"{name}.json"
        old = json.loads(subprocess.run(["git", "show", f"{revision}:{rel}"], cwd=ROOT, check=True,
                                        capture_output=True, text=True).stdout)
        new = json.loads((GOLDEN / f"{name}.json").read_text())
        was, now = golden.normalised(old["outputs"], {}), golden.normalised(new["outputs"], {})
        bits = golden.differences(now, was, exact=True)
        over = golden.differences(now, was, exact=False)
        beyond += len(over)
        print(f"{name}: recorded on {old['fingerprint']}, now {new['fingerprint']}: {len(bits)} values "
              f"differ in their last bits, {len(over)} beyond the tolerances")
        for line in over[:10]:
            print("   ", line)
    return 1 if beyond else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
