"""``claim(opts)``: the library function behind ``vitplast claim`` (see its HELP in command.py).

A straight pipeline of phases, each owned by one module that calls only downward: the session
(`.session`: process group, device, threads, executor), the plan (`.grid`: every input checked, every
existing run's config compared, nothing written), the estimate (`.estimate`), then with ``--out``
held: the measurement and the criteria's scores (`.measurement`), the training (`.training`: through
the executor, this process, ``--jobs`` processes or Ray tasks; ``--shard`` trains its slice and stops
there; the run without it widens ``--lr auto`` and trains the budgets' second phase), and last the
analysis (`.results`: per dataset, and over several datasets the aggregate) and its files
(`.writing`). This process, the driver, is the one writer of the experiment's summaries.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..options.fields import options_for
from ..outputs.reporter import Reporter
from ..runs.lock import holding
from .estimate import estimate_claim
from .grid import plan_claim
from .measurement import measure_claim
from .options import ClaimOptions
from .result import ClaimResult
from .results import analyse_claim, shard_result
from .session import open_session
from .training import train_claim
from .writing import write_claim


def claim_options(opts: ClaimOptions | None = None, /, **keywords) -> ClaimOptions:
    """``opts`` checked, or the options the keywords describe (the CLI's names, underscores for dashes:
    ``components="MHA,FC1,LN1"``, ``lr="1e-3,3e-3"``, ``seed="0,1,2"``, ``out=DIR``)."""
    return options_for(ClaimOptions, opts, keywords)


def claim(opts: ClaimOptions | None = None, /, *, reporter: Reporter | None = None, after_step=None,
          **keywords) -> ClaimResult:
    """Run the claim ``opts`` describes (a `ClaimOptions`, or keywords that build one).

    Returns a `vitplast.claim.result.ClaimResult`: for one arm its ``config``, ``plan``, ``estimate``,
    ``measurement``, ``analysis``, ``runs`` and report (``text``); for several, the arms' results under
    ``datasets`` with the ``aggregate`` and its report; a dry run: only ``config``, ``plan`` and
    ``estimate``; a ``--shard``: ``config``, ``plan`` and ``runs``. Writes OUT/claim.json,
    OUT/claim.txt, OUT/claim.png (several datasets: those of each in OUT/datasets/NAME/, and
    OUT/aggregate.json, .txt, .png). ``reporter`` receives the messages (default: printed);
    ``after_step(done)`` is called after every step of every run trained in this process (a test may
    raise there to stop as if killed).
    """
    opts = claim_options(opts, **keywords)
    started = time.perf_counter()
    with open_session(opts, reporter) as ses:
        plan = plan_claim(opts, device=ses.device, amp=ses.amp, reporter=ses.reporter, progress=ses.progress,
                          run_bars=ses.progress and ses.executor.in_process, n_procs=ses.n_procs)
        est = estimate_claim(opts, plan, n_procs=ses.n_procs, on_cluster=ses.executor.runs_at_once is None,
                             reporter=ses.reporter)
        if opts.dry_run:
            return ClaimResult(plan.record, plan.summary, est)
        # one claim writes --out at a time; a shard's runs share it with the other shards'
        with holding(opts.out, hold=opts.shard is None and ses.dist.is_main):
            with ses.executor as executor:  # connected (a cluster) before any file is written
                if (where := executor.describe()) is not None:
                    ses.reporter.say(f"executor: {where}")
                measured, budgets = measure_claim(opts, plan.grids, ses.device, ses.reporter, amp=ses.amp,
                                                 progress=ses.progress, write=ses.dist.is_main)
                train_started = time.perf_counter()
                trained = train_claim(opts, ses, executor, plan, budgets, after_step)
            if opts.shard is not None:
                return shard_result(plan, trained)
            train_seconds = time.perf_counter() - train_started
            result = analyse_claim(opts, plan, measured, trained, est, started=started,
                                   train_seconds=train_seconds)
            return write_claim(result, plan, ses, Path(opts.out))
