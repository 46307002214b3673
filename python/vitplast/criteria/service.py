"""The one scoring service: criteria by name on a model factory, its units and its data, their scores
read back from a cache when what they depend on is unchanged, else scored now.

`score_criteria` is what ``vitplast measure``, ``vitplast claim`` and `vitplast.score` call, plasticity
included: each criterion's inputs are built from its class's own ``needs`` (the labelled sample only when a
criterion reads ``images`` or ``labels``, the paired images only when it reads ``pairs``) and ``per_seed``
(every seed, or the first); its cache key is `cache_key` of the model's provenance record, the data that
criterion reads and its options; a cached file of another format version (the code's) is refused by its
reader; and a cached file is believed only once its checksum, schema and ranges are checked
(`CriterionResult.from_json`) and it holds the model's units. A file that fails is scored again with one line
naming it and why; the files reused are recorded with their checksums (`Scores.reused`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..data.datasets import first_batches
from ..outputs.result_files import ResultFileError, ReusedFile
from .base import Criterion, Setting, Units
from .loop import Batch
from .registry import get_criterion
from .result import CriterionResult

# what reads the labelled sample (``batches``); what reads the paired images (``pair_batches``)
SAMPLE_NEEDS = frozenset({"images", "labels"})
PAIR_NEEDS = frozenset({"pairs"})


def cache_key(record: Mapping, options: Mapping) -> str:
    """sha256 of what scores depend on: ``record`` (a provenance record: model, weights' hash, data,
    transform; its ``versions`` left out) and ``options`` (the criterion's name, the data it reads,
    what changes its scores). The one key of every cached score and measurement."""
    prov = {k: v for k, v in record.items() if k != "versions"}
    text = json.dumps({"provenance": prov, "options": dict(options)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class ScoreCache:
    """Where scores are kept and what they are made from.

    Args:
        folder: where each criterion's file is (`Criterion.file_name`); None: no cache.
        record: the provenance record of the model, the data and the transform.
        context: the options every criterion's scores depend on (components, precision, device, ...).
        inputs: by need (``"images"``, ``"pairs"``), what draws that input (batches, batch size, seed):
            part of the key of the criteria that read it.
    """

    folder: str | os.PathLike | None
    record: Mapping
    context: Mapping = dataclasses.field(default_factory=dict)
    inputs: Mapping[str, Mapping] = dataclasses.field(default_factory=dict)

    def options(self, criterion: Criterion, setting: Setting) -> dict:
        """The options of ``criterion``'s key: the context, what draws each input it needs, its seeds
        when ``per_seed``, its own options (`Criterion.options`)."""
        options: dict[str, Any] = {"criterion": criterion.name, **self.context}
        for need in sorted(criterion.needs):
            options.update(self.inputs.get(need, {}))
        seeds = {"seeds": list(setting.seeds)} if criterion.per_seed else {}
        return {**options, **seeds, **criterion.options(setting)}

    def key(self, criterion: Criterion, setting: Setting) -> str:
        return cache_key(self.record, self.options(criterion, setting))

    def path(self, criterion: Criterion) -> Path | None:
        return None if self.folder is None else Path(self.folder) / criterion.file_name

    def write(self, result: CriterionResult) -> str:
        """Writes ``result`` into the folder (created when missing) as its criterion writes it; returns
        the file's checksum."""
        criterion = get_criterion(result.criterion)
        self.path(criterion).parent.mkdir(parents=True, exist_ok=True)
        return criterion.write(result, self.path(criterion))


@dataclasses.dataclass(frozen=True)
class ScoringRequest:
    """What the criteria are scored on (the fields of `Setting`, its inputs drawn only when needed).

    Args:
        model_for: the network of seed ``s`` (on ``device``): as the finetuning run of that seed starts it.
        units: the model's units (`resolve_units`); a cached file must hold them. None: not checked.
        batches: the labelled sample (`Batch`es), or a callable drawing it (called only when a
            criterion to score reads images or labels).
        pair_batches: a callable returning plasticity's forward inputs in pairing order.
        seeds, components, device, amp, options, progress: as `Setting`'s.
    """

    model_for: Callable[[int], Any]
    units: Units | None = None
    batches: Sequence[Batch] | Callable[[], Sequence[Batch]] = ()
    pair_batches: Callable[[], Iterable] | None = None
    seeds: tuple[int, ...] = (0,)
    components: Mapping | None = None
    device: Any = "cpu"
    amp: Callable | None = None
    options: Mapping = dataclasses.field(default_factory=dict)
    progress: bool = False

    def setting(self, needs: frozenset[str] = frozenset()) -> Setting:
        """The `Setting` holding the inputs ``needs`` asks for (the others left empty)."""
        batches = self.batches if needs & SAMPLE_NEEDS else ()
        return Setting(self.model_for, seeds=tuple(self.seeds),
                       batches=tuple(batches() if callable(batches) else batches),
                       pair_batches=self.pair_batches if needs & PAIR_NEEDS else None,
                       components=self.components, device=self.device, amp=self.amp,
                       options=self.options, progress=self.progress)


@dataclasses.dataclass
class Scores(Mapping):
    """Criteria's scores by name (a mapping of `CriterionResult`), each one's cache key and the files
    read back instead of scoring (`ReusedFile`, with their checksums)."""

    results: dict[str, CriterionResult]
    keys: dict[str, str | None] = dataclasses.field(default_factory=dict)
    reused: dict[str, ReusedFile] = dataclasses.field(default_factory=dict)

    def __getitem__(self, name: str) -> CriterionResult:
        return self.results[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def records(self) -> list[dict]:
        """One dict per (criterion, component, layer): ``criterion``, ``component``, ``layer``,
        ``value`` (NaN: not defined for that unit)."""
        return [{"criterion": n, "component": c, "layer": layer, "value": float(r.values[i, li])}
                for n, r in self.results.items() for i, c in enumerate(r.components)
                for li, layer in enumerate(r.layers)]

    def to_dataframe(self):
        """`records` as a pandas ``DataFrame`` (columns criterion, component, layer, value)."""
        import pandas as pd  # optional dependency, loaded when a frame is asked for

        return pd.DataFrame(self.records(), columns=["criterion", "component", "layer", "value"])

    def ranking(self, name: str) -> list[tuple[str, float]]:
        """Components of criterion ``name``, highest score (finetune first) first."""
        return self.results[name].ranking()


def seeded_models(build: Callable[[], Any], device) -> Callable[[int], Any]:
    """A model factory (`ScoringRequest.model_for`): ``build()`` under ``torch.manual_seed(seed)`` (the
    RNG state restored after: a seed draws the head its finetuning run draws), once per seed, on
    ``device`` in eval mode."""
    @functools.cache
    def model_for(seed: int):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return build().to(device).eval()

    return model_for


def labelled_sample(dataset, *, batch_size: int, count: int, seed: int, device, what: str) -> list[Batch]:
    """The criteria's labelled sample: the first ``count`` batches of ``batch_size`` images of ``dataset`` in
    the order ``seed`` draws, on ``device``; ValueError naming ``what`` (the data) when it holds none."""
    found = first_batches(dataset, batch_size, count, seed)
    if not found:
        raise ValueError(f"--criterion-batches {count}: {what} holds no labelled batch")
    return [Batch(images.to(device), labels.to(device)) for images, labels in found]


def score_criteria(names: Sequence[str], request: ScoringRequest, *, cache: ScoreCache | None = None,
                   say: Callable[[str], None] = print) -> Scores:
    """`Scores` of criteria ``names`` (checked against the registry) on ``request``: each read back from
    ``cache`` when its file holds the same key and its checksum, schema, ranges and units check out (recorded
    in `Scores.reused`), else scored now (``say``: one line naming a file that failed and why). Each result's
    ``meta["cache_key"]`` is its key; the caller writes the scored ones (`Criterion.write`)."""
    criteria = {n: get_criterion(n) for n in dict.fromkeys(names)}
    keys = {n: cache.key(c, request.setting()) if cache is not None else None for n, c in criteria.items()}
    results: dict[str, CriterionResult] = {}
    reused: dict[str, ReusedFile] = {}
    for n, c in criteria.items():
        if (found := _cached(c, cache, keys[n], request.units, say)) is not None:
            results[n], path = found
            reused[n] = ReusedFile(str(path), results[n].checksum)
    if todo := [n for n in criteria if n not in results]:
        setting = request.setting(frozenset().union(*(criteria[n].needs for n in todo)))
        for n in todo:
            results[n] = criteria[n].score(setting)
            if keys[n] is not None:
                results[n].meta["cache_key"] = keys[n]
    return Scores({n: results[n] for n in criteria}, keys, reused)


def _cached(criterion: Criterion, cache: ScoreCache | None, key: str | None, units: Units | None,
            say: Callable[[str], None]) -> tuple[CriterionResult, Path] | None:
    """``(result, path)`` of ``criterion``'s cached file when it holds ``key`` and checks out, else None
    (no file: silently; another key, another criterion's scores or a file that fails its checks: one
    line naming the file)."""
    path = None if cache is None else cache.path(criterion)
    if path is None or not path.exists():
        return None
    try:
        saved = criterion.read(path)
        if saved.criterion != criterion.name:
            raise ResultFileError(path, "criterion", f"{saved.criterion!r}, not {criterion.name!r}")
        if saved.meta.get("cache_key") != key:
            say(f"{criterion.name}: scoring again, {path} was scored with other inputs or options")
            return None
        if units is not None:
            saved.expect_units(units.components, units.layers, path)
    except ResultFileError as exc:
        say(f"{criterion.name}: scoring again, {exc}")
        return None
    return saved, path
