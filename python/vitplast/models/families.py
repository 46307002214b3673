"""Model families behind one registry (`FAMILIES`): the embedded digits ViT, timm models and
Hugging Face transformers models, each with what the commands need to know of it, so that no code
outside `vitplast.models` names a family. A ``--model`` name belongs to the family its source says
(`vitplast.models.sources.model_source`).

A new family is a module of `vitplast.models` with its builder (``build_my(plan, request) ->
BuiltModel``) and an entry here: its builder, what its checkpoints keep (a pretraining head that
finetuning replaces), whether its runs are small enough to share a CPU (one thread each, side by
side), whether ``vitplast profile`` times it, and its checks of the model options and of where its
one-time work (a pretraining, a download, done by its builder on first use) would write.
`vitplast.models.builder.build_model` builds every model through the entry of its source's family.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from .digits import build_digits, check_cache_dir
from .digits_vit import check_digits_options
from .hf_models import build_hf
from .sources import model_source
from .timm_models import build_timm

if TYPE_CHECKING:
    from .built import BuildRequest, BuiltModel
    from .sources import ModelPlan


def _check_digits_plan(plan: ModelPlan, pretrain_config: dict | None, cache_dir) -> None:
    check_digits_options(plan.model_kwargs, plan.img_size, pretrain_config)
    if plan.weights is None and not plan.random_init:  # pretrained into the cache on its first use
        check_cache_dir(cache_dir)


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """What the commands know of a family of models, and its builder (``build(plan, request)``: the
    `BuiltModel` of a `ModelPlan` whose source is of this family)."""

    name: str
    build: Callable[[ModelPlan, BuildRequest], BuiltModel]
    keeps_pretraining_head: bool = False  # finetuning replaces its head whatever the number of classes
    small: bool = False  # tiny matrices: on CPU one thread per run, and runs side by side
    profiled: bool = True  # `vitplast profile` times it
    check: Callable[[dict | None, int | None], None] | None = None  # of --model-arg and --img-size
    check_plan: Callable[[ModelPlan, dict | None, object], None] | None = None  # before a build

    def check_build(self, plan: ModelPlan, *, pretrain_config: dict | None = None, cache_dir=None) -> None:
        """ValueError when building ``plan`` cannot work: its model options, and where its one-time
        work would write (``cache_dir``, ``pretrain_config``: the digits ViT's pretraining)."""
        if self.check_plan is not None:
            self.check_plan(plan, pretrain_config, cache_dir)

    def check_options(self, model_kwargs: dict | None, img_size: int | None) -> None:
        """ValueError when the model options ask what this family's models cannot do."""
        if self.check is not None:
            self.check(model_kwargs, img_size)


FAMILIES = {
    "digits": ModelFamily("digits", build_digits, keeps_pretraining_head=True, small=True, profiled=False,
                          check=check_digits_options, check_plan=_check_digits_plan),
    "timm": ModelFamily("timm", build_timm),
    "hf": ModelFamily("hf", build_hf),
}


def family_of(model: str) -> ModelFamily:
    """The family of the ``--model`` name ``model`` (a name the sources refuse counts as timm's: the
    model builder names what is wrong with it, where it is built)."""
    try:
        return FAMILIES[model_source(model).kind]
    except ValueError:
        return FAMILIES["timm"]
