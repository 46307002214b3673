"""``capture(model, ...)``: forward hooks that measure plasticity while the model runs, streaming.

Usage:
    with vitplast_kernels.capture(model, protocol="in_situ", pairs="halves") as acts:
        model(images)                      # (2B, ...) images; any number of forward passes
    res = vitplast_kernels.pairwise_plasticity(acts)

Every hook reduces what it sees *immediately* through the paired op (per pair: a sum of squared
differences) and keeps only those ``(P,)`` sums of its input and output. When the forward ends, the
rates of all (component, layer) rows are computed at once and ``[count, sum, sumsq, identical,
nonfinite]`` (float64; a sixth field with ``pairs="all"``) are added in place to accumulators allocated
when the capture is attached, on the model's device. No activation outlives the forward; hooks work on
``.detach()``-ed tensors (no autograd graph growth, the training step's gradients are unchanged); no
host-device synchronisation happens until a value of the result is asked for. Matched pairs (``X[i]``
from one dataset with ``Y[i]`` from another, as in the paper) are measured as ``model(torch.cat([X, Y]))``.

Protocols (strategy objects in `.protocols`): ``"in_situ"`` (the real forward; a tensor seen by
two hooks of one layer, e.g. LN1's output that *is* MHA's input in a pre-norm block, is reduced once)
and ``"decomposition"`` (the paper's: every component applied to the embedding output ``e``; FC2 gets
``e`` zero-padded to its input width). In train mode the decomposition's extra calls run on forked
random generators in eager mode, so the real forward's dropout masks are unchanged.

Finer views: ``per_head=True`` adds per-head MHA rates (head ``h``'s slice of the input of the
attention's output projection against the MHA input; for ``nn.MultiheadAttention``, which never calls
its projection as a module, that input is recomputed from the call, `.mha_heads`);
``tokens="cls" | "patches" | "all"`` restricts every distance to the class token, the tokens after the
prefix, or all tokens.

``torch.compile``: the hooks are traceable and trace into the model's graph with no graph break
(``fullgraph=True`` works): per-forward bookkeeping is Python structure resolved when a forward is
traced, sums and counters live in device tensors updated in place. Attach the capture (or a
`monitor`) *before* compiling: the hooks are part of the compiled code. A model
compiled without the hooks (another instance of the model, or this one before attaching) is not reused
for it: while a capture is attached, code compiled guards on module hooks (`.hook_guards`, the one
``torch._dynamo`` setting it changes, restored when the last capture detaches), and where hook-less
code runs anyway (compiled before attaching) `.forward_check` raises at the first check that sees
a forward that was not measured (``torch._dynamo.reset()`` after attaching makes it recompile).
Under compile, the decomposition's extra calls do not fork the random generators.

Batches that do not fit the pairing (an odd batch with ``pairs="halves"``) are skipped and counted,
with one warning, unless ``strict=True``, which raises ValueError: from inside the forward in eager
mode; under ``torch.compile`` outside the graph (after the forward, or at ``step()`` / ``result()``),
with the same text.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping
from typing import Any

import torch

from ..ops import validate
from . import presets as _presets
from . import targets
from .accumulator import FORWARDS, SKIPPED, Accumulator
from .forward_check import ForwardCheck
from .forward_state import ForwardState
from .hook_guards import hook_guards_off, hook_guards_on
from .mha_heads import head_outputs
from .module_io import input_of
from .pairings import Pairing, get_pairing
from .protocols import make_protocol
from .result import PlasticityResult

PROTOCOLS = ("in_situ", "decomposition")
TOKENS = ("all", "cls", "patches")
# Every (component, layer) row is reached once per forward, so one fixed row stands for its forward in
# the counters: the forward is counted measured when this row is added, skipped when its batch is.
FORWARD_ROW = (0, 0)  # (component, layer)


class Capture:
    """The state of one measurement: hooks, accumulators; use through `capture`.

    Attributes: ``components`` (labels), ``layers`` (layer labels, block order), ``modules``
    (``{label: {layer: module names}}``), ``enabled`` (hooks measure when True; a disabled capture
    adds nothing to a traced graph), ``n_forwards`` (root forward passes measured; reads the device).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        protocol: str = "in_situ",
        pairs: str | Pairing = "halves",
        components: Mapping[str, _presets.Pattern] | None = None,
        embedding: str | None = None,
        per_head: bool = False,
        tokens: str = "all",
        prefix_tokens: int | None = None,
        backend: str = "auto",
        strict: bool = False,
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        if tokens not in TOKENS:
            raise ValueError(f"tokens must be one of {TOKENS}, got {tokens!r}")
        self.model = model
        self.protocol = protocol
        self.pairing = get_pairing(pairs)
        self.backend = backend
        self.per_head = bool(per_head)
        self.tokens = tokens
        self.strict = bool(strict)
        self.enabled = True
        t = targets.resolve_components(model, components, embedding)
        self.preset: str | None = t.preset
        self.components: tuple[str, ...] = t.components
        self.modules, embedding, proj_name = t.modules, t.embedding, t.proj
        self._layer_index = {k: i for i, k in enumerate(t.layer_keys)}
        self.layers: tuple[str, ...] = tuple(".".join(k) or "0" for k in t.layer_keys)
        self._named = dict(model.named_modules())
        self._token_slice = targets.token_slice(model, tokens, prefix_tokens)
        self.embedding = embedding
        emb_module, emb_is_input = None, False
        if protocol == "decomposition":
            emb_module, emb_is_input = targets.find_embedding(self._named, embedding)
        self._protocol = make_protocol(protocol, emb_module, emb_is_input)
        self._heads: dict[int, tuple[str, int]] = {}  # layer index -> (proj module name, heads)
        if self.per_head:
            self._heads = targets.find_heads(self.modules, self._named, self._layer_index, proj_name)
        self._handles: list[Any] = []
        self._fwd = ForwardState()
        self._acc: Accumulator | None = None
        # host flags, only ever set to True by hooks (a store, not a read: nothing for compile to guard)
        self._fired = self._skipped = False
        self._warned_skip = False
        self.strict_error: str | None = None  # strict=True under compile: raised outside the graph
        self.forward_check = ForwardCheck(self)  # every forward measured, or an error
        self.attached = False

    # ---------------------------------------------------------------- attach / detach
    def attach(self) -> Capture:
        """Registers the hooks (what entering the with-block does) and allocates the accumulators on
        the model's device. Attach before ``torch.compile`` runs the model."""
        if self.attached:
            raise RuntimeError("this capture is already attached")
        if self._acc is None:
            heads = max((h for _, h in self._heads.values()), default=None)
            self._acc = Accumulator(self.pairing, len(self.components) * len(self.layers), len(self.layers),
                                    heads, targets.device_of(self.model))
        h = self._handles
        for c, per_layer in self.modules.items():
            ci = self.components.index(c)
            for key, names in per_layer.items():
                li = self._layer_index[key]
                for name in names:
                    h.append(self._protocol.register(self, self._named[name], name, ci, li, len(names)))
        h.extend(self._protocol.register_root(self))
        h.extend(self.forward_check.register(self.model))
        for li, (name, heads) in self._heads.items():
            module = self._named[name]
            if isinstance(module, torch.nn.MultiheadAttention):  # before the MHA row's own hook
                hook = functools.partial(self._torch_mha_hook, li, heads, name)
                h.append(module.register_forward_hook(hook, with_kwargs=True, prepend=True))
            else:
                hook = functools.partial(self._proj_hook, li, heads, name)
                h.append(module.register_forward_pre_hook(hook))
        hook_guards_on(self)  # code compiled from now on guards on these hooks
        self.attached = True
        return self

    def detach(self) -> None:
        """Removes every hook and drops per-forward state; the accumulated sums stay."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._flush()
        if self.attached:
            hook_guards_off(self)
        self.attached = False

    def __enter__(self) -> Capture:
        return self.attach()

    def __exit__(self, *exc) -> None:
        self.detach()

    # ---------------------------------------------------------------- what protocols use
    def live(self) -> bool:
        """Whether a component hook measures now: the capture is enabled and this is not the
        decomposition's own extra call of a component on ``e``."""
        return self.enabled and not self._fwd.extra_call

    @property
    def forward_state(self) -> ForwardState:
        """The running forward's state (``e``, ``s_e``, ``e_skipped``, ``extra_call``: decomposition)."""
        return self._fwd

    def module(self, name: str) -> torch.nn.Module:
        """The model's submodule called ``name``."""
        return self._named[name]

    # ---------------------------------------------------------------- reductions
    def _fits(self, t: torch.Tensor, where: str) -> bool:
        """Whether ``t``'s batch fits the pairing; a batch that does not is skipped (the hook measures
        nothing) or raises with ``strict=True`` (under compile: recorded, raised outside the graph, as a
        raise inside it would surface as Dynamo's "Observed exception")."""
        if self.pairing.fits(t.shape[0]):
            return True
        if self.strict:
            if not torch.compiler.is_compiling():
                self.pairing.check(t.shape[0], where)
            self.strict_error = self.pairing.problem(t.shape[0], where)
        return False

    def _view(self, t: torch.Tensor, where: str) -> torch.Tensor:
        if t.requires_grad:  # no_grad forwards (a measurement's usual case) pass tensors as they are
            t = t.detach()
        if t.dtype not in validate.SUPPORTED_DTYPES:  # named by module, not by the op's argument
            raise TypeError(validate.dtype_problem(f"capture: the activation of {where}", t.dtype))
        if t.dim() < 2:
            raise ValueError(f"{where}: expected a (N, ...) activation with N sequences first, got shape "
                             f"{tuple(t.shape)}")
        if self._token_slice is not None:
            if t.dim() < 3:
                raise ValueError(f"tokens={self.tokens!r}: {where} has shape {tuple(t.shape)}, no token dim")
            t = t[:, self._token_slice]
            if t.shape[1] == 0:
                raise ValueError(f"tokens={self.tokens!r}: no token of {where} is left after the "
                                 f"{self._token_slice.start} prefix tokens (prefix_tokens)")
        return t

    def reduce(self, li: int, items: list[tuple[int, str, torch.Tensor]], where: str, *,
               share: bool = True, counts_skip: bool = False) -> list[torch.Tensor | None]:
        """Per-pair sums of each ``(component, end, tensor)`` of layer ``li``. A tensor already reduced
        in this layer during this forward (LN1's output is MHA's input) is reused: which endpoint is
        which tensor is resolved when a forward is traced, not looked up by address. Returns ``None``
        entries when the batch does not fit the pairing; ``counts_skip``: this call stands for its
        forward in the skipped-batch counter (the protocol's first reduction of a forward)."""
        if torch.compiler.is_compiling():
            self.forward_check.traced = True  # a side effect the compiled code replays on every call
        f = self._fwd
        out: list[torch.Tensor | None] = [None] * len(items)
        todo: list[int] = []
        for i, (_, _, t) in enumerate(items):
            if share:
                out[i] = f.reduced(li, t)
            if out[i] is None and not any(items[j][2] is t for j in todo):
                todo.append(i)
        if todo:
            for i in todo:
                if not self._fits(items[i][2], where):
                    if counts_skip:
                        self._note_skip()
                    return [None] * len(items)
            sums = self.pairing.sq_sums([self._view(items[i][2], where) for i in todo], backend=self.backend)
            rows = sums.unbind(0)  # one call for every tensor's (P,) row, each kept and returned
            for j, i in enumerate(todo):
                out[i] = rows[j]
            if share:
                f.keep(li, [(items[i][2], rows[j]) for j, i in enumerate(todo)])
        for i, (_, _, t) in enumerate(items):  # duplicates inside this call
            if out[i] is None:
                out[i] = out[next(j for j in todo if items[j][2] is t)]
        return out

    def counts_forward(self, ci: int, li: int) -> bool:
        """Whether the hook of component ``ci``, layer ``li`` counts its forward (`FORWARD_ROW`):
        what a protocol passes as ``counts_skip`` to `reduce`."""
        return (ci, li) == FORWARD_ROW

    def _row(self, ci: int, li: int) -> int:
        return ci * len(self.layers) + li

    def add_row(self, ci: int, li: int, nparts: int, s_in: torch.Tensor, s_out: torch.Tensor) -> None:
        """Adds the row of component ``ci``, layer ``li``. The forward's rows are flushed as soon as all
        ``C x L`` rows are in (the model's root module has no hook: under torch.compile the whole
        measurement stays inside the model's graph), or when a row comes round again (a new forward
        after an incomplete one, or a module called twice)."""
        f = self._fwd
        s_out = f.gather(ci, li, nparts, s_in, s_out)
        if s_out is None:  # parts of the component still to come
            return
        row = self._row(ci, li)
        if row in f.seen:
            self._flush(end=False)
        f.add(row, s_in, s_out, li if self.components[ci] == "MHA" else None)
        if len(f.seen) == len(self.components) * len(self.layers):
            self._flush(end=True)

    def _flush(self, end: bool = True) -> None:
        """Turns the rows of the running forward into statistics and adds them to the accumulators;
        ``end``: the forward is over (its per-forward state, ``e`` included, is dropped)."""
        f, acc = self._fwd, self._acc
        if acc is not None and (f.rows or f.head_rows):
            acc.add_rows(list(f.rows), forwards=int(self._row(*FORWARD_ROW) in f.seen))
            acc.add_head_rows(list(f.head_rows))
            self._fired = True
        if end:
            f.clear()
        else:
            f.new_rows()

    def _note_skip(self) -> None:
        self._acc.count(SKIPPED)
        self._skipped = True
        if not torch.compiler.is_compiling():
            self._warn_skipped()

    def _warn_skipped(self) -> None:
        if not self._warned_skip:
            self._warned_skip = True
            warnings.warn(
                f"capture: a batch that does not fit pairs={self.pairing.name!r} was skipped (counted in "
                "result().meta['skipped_batches']; strict=True raises instead)", RuntimeWarning, stacklevel=2)

    def _heads_measured(self) -> bool:
        """Whether a per-head hook measures now: in_situ the real forward, decomposition the call on e."""
        return self.enabled and (self.protocol == "decomposition") == self._fwd.extra_call

    def _proj_hook(self, li, heads, name, module, args) -> None:
        if self._heads_measured():
            self._set_heads(li, heads, name, input_of(args, {}))

    def _torch_mha_hook(self, li, heads, name, module, args, kwargs, output) -> None:
        if self._heads_measured():
            self._set_heads(li, heads, name, head_outputs(module, args, kwargs))

    def _set_heads(self, li: int, heads: int, name: str, t: torch.Tensor | None) -> None:
        """Per-head sums of ``t`` ``(N, n, H*dh)``, the heads' outputs of layer ``li``, concatenated."""
        if t is None or t.shape[-1] % heads:
            raise ValueError(f"per_head=True: the input of {name} must be (N, n, H*dh) with H = {heads}, "
                             f"got {None if t is None else tuple(t.shape)}")
        if not self._fits(t, name):
            return
        dh = t.shape[-1] // heads
        v = self._view(t, name)
        sums = self.pairing.sq_sums([v[..., h * dh : (h + 1) * dh] for h in range(heads)],
                                    backend=self.backend)
        self._fwd.set_heads(li, sums)

    # ---------------------------------------------------------------- result
    @property
    def n_forwards(self) -> int:
        """Root forward passes measured (reads the counter from the device: synchronises)."""
        return 0 if self._acc is None else int(self._acc.counters[FORWARDS])

    def forwards_seen(self) -> torch.Tensor | None:
        """Device int64 scalar: forwards whose hooks ran, measured or skipped (no sync)."""
        return None if self._acc is None else self._acc.counters[FORWARDS] + self._acc.counters[SKIPPED]

    def result(self) -> PlasticityResult:
        """The accumulated statistics. Raises when nothing was measured, or when a forward ran unmeasured
        (`.forward_check`: reads two device counters; no other sync unless batches were skipped)."""
        self._flush()  # rows of a forward whose root hooks did not run (a submodule called directly)
        self.forward_check.verify()  # raises when a forward ran unmeasured (reads two counters)
        if not self._fired:
            if self._skipped:
                raise RuntimeError("nothing was measured: every batch was skipped (it did not fit "
                                   f"pairs={self.pairing.name!r})")
            raise RuntimeError(
                "nothing was measured: no component hook fired while the capture was enabled. Either no "
                "forward pass of the model ran inside capture(...) (call model(x) inside the with-block), "
                "or the model was torch.compile'd and run before the capture was attached: its cached "
                "code ignores hooks added later; attach the capture (or vitplast_kernels.monitor) before "
                "compiling, or run torch._dynamo.reset() after attaching so that it recompiles."
            )
        acc = self._acc
        meta = {"protocol": self.protocol, "pairs": self.pairing.name, "tokens": self.tokens,
                "model": targets.model_name(getattr(self.model, "_orig_mod", self.model)),
                "preset": self.preset}
        if self._skipped:
            self._warn_skipped()
            meta["skipped_batches"] = int(acc.counters[SKIPPED])
        if self.per_head and not acc.head_rows_added:
            warnings.warn(
                f"per_head=True but no output projection ({sorted({p for p, _ in self._heads.values()})[:2]}"
                "...) was called as a module (an attention that applies its projection's weights "
                "directly): the result has no per-head rates",
                stacklevel=2,
            )
        stats = acc.acc.clone().view(len(self.components), len(self.layers), acc.acc.shape[-1])
        heads = acc.head_acc.clone() if acc.head_rows_added else None
        return PlasticityResult(stats, self.components, self.layers, heads=heads, meta=meta)

    def reset(self) -> None:
        """Forgets the accumulated sums (the hooks stay)."""
        if self._acc is not None:
            self._acc.zero_()
        self._fwd.clear()
        self._fired = self._skipped = False
        self.strict_error = None
        self.forward_check.reset()


def capture(
    model: torch.nn.Module,
    *,
    protocol: str = "in_situ",
    pairs: str | Pairing = "halves",
    components: Mapping[str, _presets.Pattern] | None = None,
    embedding: str | None = None,
    per_head: bool = False,
    tokens: str = "all",
    prefix_tokens: int | None = None,
    backend: str = "auto",
    strict: bool = False,
) -> Capture:
    """A `Capture` of ``model``'s components; hooks attach when the with-block is entered.

    Args:
        model: any ``nn.Module``; inputs are ``(N, ...)`` with ``N`` sequences first.
        protocol: ``"in_situ"`` (the real forward) or ``"decomposition"`` (every component on ``e``).
        pairs: ``"halves"``: a batch of ``2B``, sequence ``i`` paired with ``i + B`` (matched pairs:
            ``model(torch.cat([X, Y]))``); ``"all"``: every distinct pair ``i < j`` of the batch.
        components: ``{label: module-name glob or tuple of globs}`` (``*`` = layer index, ``**`` = any
            prefix, ``?`` and ``[...]`` inside a segment as in fnmatch); default: detected from the
            presets (timm ViT/DeiT/Eva/DINOv2/DINOv3, SwiGLU, hybrid and parallel-block ViTs, HF ViT,
            BERT, GPT-2; see `vitplast_kernels.measure.presets`).
        embedding: decomposition only: the module whose output is ``e`` or ``"<name>:input"``.
        per_head: also measure per-head MHA rates (see the module docstring).
        tokens: ``"all"``, ``"cls"`` (token 0) or ``"patches"`` (after ``prefix_tokens``).
        prefix_tokens: class/register tokens before the patches (default ``model.num_prefix_tokens``).
        backend: the paired op's backend (``"auto"``, ``"cpu"``, ``"torch"``, GPU backends).
        strict: raise on a batch that does not fit the pairing (default: skip it, count it, warn once).
    """
    return Capture(model, protocol=protocol, pairs=pairs, components=components, embedding=embedding,
                   per_head=per_head, tokens=tokens, prefix_tokens=prefix_tokens, backend=backend,
                   strict=strict)
