"""The one model builder of the commands: ``build_model(request, num_classes)`` builds the model a
`ModelRequest` names (the command-line model options give one:
`vitplast.options.groups.ModelOptions.model_request`), with its weights, its input size, its own
input preparation (an `vitplast.data.transforms.ImageTransform`) and where its weights came from.

What ``request.model`` names (`vitplast.models.sources`):

- ``DIGITS_MODEL`` (``"digits-vit"``): the embedded ViT (`vitplast.models.digits`); without
  ``weights`` the one pretrained here on digits 0-4 (cached; pretrained first when absent), with
  ``weights`` that architecture loaded from them, with ``random_init`` its random init. Its head keeps
  the pretraining classes (a finetune run replaces it); its architecture is fixed, so ``model_kwargs``
  and another ``img_size`` are errors. It declares its own transform (digits in [-1, 1]);
- a timm name (tags, ``hf-hub:``, ``local-dir:``, a timm model folder): the timm model with a
  ``num_classes`` head (`vitplast.models.timm_models.create_vit`): timm's published weights with
  ``pretrained``, a local checkpoint with ``weights``, random init with ``random_init``; its transform
  is timm's data config;
- ``hf:ID_OR_DIR`` (or a transformers model folder): the transformers image classifier
  (`vitplast.models.hf_models`) with its weights (its config alone with ``random_init``), the head
  replaced when ``num_classes`` differs from its own; its transform is its image processor's.

``weights`` may also be a model folder (a hub snapshot, a ``save_pretrained`` directory: its
``config.json`` gives the model when ``request.model`` is None or the same architecture), or a ``vitplast
finetune`` run directory (or its ``checkpoint.pt`` / ``model.safetensors``), whose ``config.json`` gives
the model, its constructor arguments and its image size (`vitplast.models.sources.resolve_architecture`).

The request is read into a `ModelPlan` (`vitplast.models.sources.plan_model`), the plan built by
its family's builder (`vitplast.models.families.FAMILIES`: `vitplast.models.digits.build_digits`,
`vitplast.models.timm_models.build_timm`, `vitplast.models.hf_models.build_hf`: the network with the
weights the family has), a ``weights`` checkpoint loaded over it (`vitplast.models.weights.load_weights`)
and the result checked for non-finite weights.
"""

from __future__ import annotations

import warnings

from .built import BuildRequest, BuiltModel, input_size
from .families import FAMILIES
from .sources import DIGITS_MODEL, ModelPlan, ModelRequest, plan_model
from .weights import load_weights

__all__ = ["DIGITS_MODEL", "BuiltModel", "ModelPlan", "ModelRequest", "build_model", "input_size",
           "plan_model"]


def build_model(request: ModelRequest, num_classes: int, *, allow_partial: bool = False, cache_dir=None,
                seed: int = 0, pretrain_config: dict | None = None, progress: bool = False) -> BuiltModel:
    """The model ``request`` names, with its weights, in eval mode on the CPU (see the module docstring).

    ``cache_dir``, ``seed``, ``pretrain_config`` and ``progress`` concern the digits ViT's one-time
    pretraining. Random initialisation (and a replaced head) draws from the torch RNG (callers seed it).
    """
    plan = plan_model(request)
    build = BuildRequest(num_classes, cache_dir, seed, pretrain_config, progress)
    built = FAMILIES[plan.source.kind].build(plan, build)  # the weights its family has, if any
    if plan.weights is not None:  # a local checkpoint over them
        load_weights(built.net, plan.weights, allow_partial=allow_partial)
    warn_nonfinite_weights(built)
    return built


def warn_nonfinite_weights(built: BuiltModel) -> list[str]:
    """The names of the model's tensors holding NaN or inf, with a warning naming them (the rates of the
    components they feed are non-finite, and left out of the ranking); [] when every value is finite."""
    import torch

    bad = [k for k, v in built.net.state_dict().items()
           if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        where = built.origin.get("file") or built.origin["kind"]
        warnings.warn(f"{built.name}: {len(bad)} weight tensor(s) hold NaN or inf ({', '.join(bad[:4])}"
                      f"{' ...' if len(bad) > 4 else ''}; from {where}); the components they feed measure "
                      "non-finite rates", stacklevel=3)
    return bad
