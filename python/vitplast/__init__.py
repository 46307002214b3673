"""vitplast: the applications of vitplast-kernels, as a Python API and as the ``vitplast`` command.

``vitplast.score(model, images, labels, criteria=...)`` (`vitplast.api.score`) scores the units of any model
on your own images; ``vitplast.measure(...)`` (`vitplast.measure.measure_scores`), ``vitplast.finetune(...)``
(`vitplast.finetune.finetune`) and ``vitplast.claim(...)`` (`vitplast.claim.claim`) run the commands and
return their typed results. Nothing heavy is imported until one of them is used.

``vitplast.measure``, ``vitplast.finetune`` and ``vitplast.claim`` are also the commands' packages: the
package object is callable, so both ``vitplast.measure(...)`` and ``vitplast.measure.MeasureOptions`` work,
whichever was imported first.
"""

from __future__ import annotations

import importlib
import sys
import types

__all__ = ["claim", "finetune", "measure", "score"]
# a command's package, and the function of it that calling the package runs
COMMANDS = {"measure": "measure_scores", "finetune": "finetune", "claim": "claim"}


class _Command(types.ModuleType):
    """A command's package that can be called: ``vitplast.measure(...)`` is
    ``vitplast.measure.measure_scores(...)``."""

    def __call__(self, *args, **kwargs):
        return getattr(self, COMMANDS[self.__name__.rpartition(".")[2]])(*args, **kwargs)


class _Root(types.ModuleType):
    """This package: a command's package set on it (as importing it does) is made callable."""

    def __setattr__(self, name: str, value) -> None:
        if name in COMMANDS and type(value) is types.ModuleType:
            value.__class__ = _Command
        super().__setattr__(name, value)


def __getattr__(name: str):
    if name in COMMANDS:
        return importlib.import_module(f"vitplast.{name}")  # set on this package, callable, by the import
    if name == "score":
        return importlib.import_module("vitplast.api").score
    raise AttributeError(f"module 'vitplast' has no attribute {name!r}")


sys.modules[__name__].__class__ = _Root  # before any command's package: they import this one first
