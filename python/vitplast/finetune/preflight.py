"""What ``vitplast finetune`` checks before it creates any file: the model (name, ``--model-arg``,
``--weights``), the data, and what each ``--train`` value asks of them (``--probe``, ``--batch-size``,
``--budget``). :func:`resolve_options` has checked every value on its own; these checks need the model
or the data, so they build both once (the RNG state of the caller is left as it was). A bad value then
stops the command with nothing written, and the corrected command finds ``--out`` as it was.
"""

from __future__ import annotations

import torch

from .data import load_data
from .model import build_model, input_size
from .trainable import parse_train


def preflight(cfg: dict) -> None:
    """Raises ValueError (or FileNotFoundError for missing data) for what a run of ``cfg`` would fail on
    before training; writes nothing."""
    seed = cfg["seed"][0]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        first, _ = load_data(cfg, seed, cfg["img_size"] or 32)
        model = build_model(cfg, first.num_classes)
        size = input_size(model, cfg)
        train_ds, val_ds = load_data(cfg, seed, size) if size != (cfg["img_size"] or 32) else (first, _)
    n = len(train_ds)
    if n == 0 or len(val_ds) == 0:
        raise ValueError(f"--data {cfg['data']}: no {'training' if n == 0 else 'validation'} images")
    if cfg["batch_size"] > n:
        raise ValueError(f"--batch-size {cfg['batch_size']} exceeds the training set of --data "
                         f"{cfg['data']} ({n} images)")
    if cfg["probe"] > n:
        raise ValueError(f"--probe {cfg['probe']} exceeds the training set of --data {cfg['data']} "
                         f"({n} images)")
    for train in dict.fromkeys(cfg["train"]):
        _check_train(cfg, train, model)


def _check_train(cfg: dict, train: str, model: torch.nn.Module) -> None:
    from .trainable import count_parameters, head_module, select_trainable

    comps = cfg.get("components")
    parts = parse_train(train, comps)
    if parts == ("lora",):
        from .trainable import lora_target_modules, lora_target_parts

        # a map without the targets (by default its attention) raises ValueError here
        lora_target_modules(model, lora_target_parts(cfg.get("lora_targets"), comps), comps)
        return  # peft and --lora-r are checked with the options
    if parts in (("auto",), ("auto@layer",)):
        head = sum(p.numel() for p in head_module(model).parameters())
        if cfg["budget"] < head:
            raise ValueError(f"--budget {cfg['budget']} is smaller than the classifier head alone ({head:,} "
                             f"parameters of {count_parameters(model):,}): --train auto trains the head "
                             "and the most plastic components that fit")
        return
    select_trainable(model, parts, comps)  # a map without the components or layers named raises here
