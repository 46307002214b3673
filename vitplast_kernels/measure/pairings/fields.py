"""Names of the statistics a result accumulates per (component, layer), in storage order (float64).

``count``: pairs used; ``sum``/``sumsq``: sum and sum of squares of their rates; ``identical``: pairs
excluded because their input distance is 0; ``nonfinite``: pairs with a non-finite value (never averaged
in). ``pairs="all"`` adds ``var_w``, the U-statistic's jackknife variance term
(`vitplast_kernels.measure.pairings.all_pairs`).
"""

STAT_FIELDS = ("count", "sum", "sumsq", "identical", "nonfinite")
U_STAT_FIELDS = (*STAT_FIELDS, "var_w")
