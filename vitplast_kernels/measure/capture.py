"""``capture(model, ...)``: forward hooks that measure plasticity while the model runs, streaming.

Usage::

    with vitplast_kernels.capture(model, protocol="in_situ", pairs="halves") as acts:
        model(images)                      # (2B, ...) images; any number of forward passes
    res = vitplast_kernels.pairwise_plasticity(acts)

Every hook reduces what it sees *immediately* through the paired op (per pair: a sum of squared
differences, float32) and keeps only those ``(P,)`` sums of its input and output. When the forward
ends, the rates of all (component, layer) rows are computed at once and ``[count, sum, sumsq,
identical, nonfinite]`` (float64; a sixth field with ``pairs="all"``) are added to the accumulators,
on the activations' device. No activation outlives the forward; hooks work on ``.detach()``-ed tensors
(no autograd graph growth, the training step's gradients are unchanged); no host-device
synchronisation happens until a value of the result is asked for. Matched pairs (``X[i]`` from one
dataset with ``Y[i]`` from another, as in the paper) are measured as ``model(torch.cat([X, Y]))``.

Protocols:

- ``"in_situ"``: the real forward. Component ``c`` of layer ``l`` has rate ``||c(x) - c(y)|| /
  ||x - y||`` for the tensors it really receives and returns (FC1: the linear's output before the
  activation; FC2: what fc2 receives, the activation's output). A tensor seen by two hooks (in a
  pre-norm block LN1's output *is* MHA's input) is reduced once, recognised by identity.
- ``"decomposition"`` (the paper's): every component of every layer is applied to the same input
  ``e``, the embedding output (timm ViT: the tokens entering ``blocks[0]``); FC2, whose input is wider,
  gets ``e`` zero-padded on the channel dim to its ``in_features`` (``[e, 0, 0, 0]`` for a 4d MLP), so
  its input distance is ``||e_x - e_y||``. When the real forward reaches a component, its hook calls the
  component once more on ``e`` (same extra arguments, e.g. rotary embeddings; under ``no_grad``),
  reduces, drops the output: peak memory is one extra activation whatever the depth. In train mode
  the extra calls run on forked random generators: the real forward's dropout masks are unchanged.

Finer views: ``per_head=True`` adds per-head MHA rates: head ``h``'s rate is ``||o_h(x) - o_h(y)|| /
||x - y||`` where ``o_h`` is head ``h``'s slice of the input of the attention's output projection
(``attn.proj`` in timm: the per-head ``softmax(QK^T) V``, before mixing), ``x`` the MHA input.
``tokens="cls" | "patches" | "all"`` restricts every distance (inputs and outputs) to the class token
(token 0), the tokens after the ``num_prefix_tokens`` prefix (patches), or all tokens. Attention mixes
tokens, so MHA's token-subset rate compares subset outputs computed from the full sequence.

``torch.compile``: the hooks run eagerly (``torch.compiler.disable``: the graph breaks around each
hook). Hooks registered before compilation are honoured (capture, then compile and run inside the
with-block: tested); with this torch, capturing an already compiled model also works (dynamo guards on
the hooks and recompiles). Should a compiled model ever run without calling the hooks,
:meth:`Capture.result` raises instead of returning nothing.
"""

from __future__ import annotations

import functools
import warnings
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from . import presets as _presets
from .pairing import Pairing, get_pairing
from .result import PlasticityResult

PROTOCOLS = ("in_situ", "decomposition")
TOKENS = ("all", "cls", "patches")
_INPUT_KWARGS = ("hidden_states", "x", "input", "inputs_embeds", "hidden_state")
_HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_head", "n_heads")
_PROJ_NAMES = ("proj", "out_proj", "o_proj", "c_proj", "output.dense", "dense", "wo")


def _eager(fn):
    """Hooks run eagerly under torch.compile: the compiled graph breaks around them (their identity
    cache and Python bookkeeping are not traceable) instead of recompiling for every call site."""
    return torch.compiler.disable(fn, recursive=True)


def _version(t: torch.Tensor) -> int:
    """In-place modification counter; inference tensors have none (-1: changes made in place under
    inference_mode go unnoticed by the identity cache)."""
    return -1 if t.is_inference() else t._version


def _first_tensor(obj: Any) -> torch.Tensor | None:
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, (tuple, list)):
        for x in obj:
            if isinstance(x, torch.Tensor):
                return x
    if isinstance(obj, Mapping):
        for x in obj.values():
            if isinstance(x, torch.Tensor):
                return x
    return None


def _input_of(args: tuple, kwargs: dict) -> torch.Tensor | None:
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    for k in _INPUT_KWARGS:
        if isinstance(kwargs.get(k), torch.Tensor):
            return kwargs[k]
    return _first_tensor(tuple(args)) or _first_tensor(kwargs)


def _num_heads(module: torch.nn.Module) -> int | None:
    for m in module.modules():
        for a in _HEAD_ATTRS:
            v = getattr(m, a, None)
            if isinstance(v, int) and v > 0:
                return v
    return None


def _in_width(module: torch.nn.Module, name: str) -> int:
    if isinstance(getattr(module, "in_features", None), int):
        return module.in_features
    w = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and isinstance(w, torch.Tensor):  # HF GPT-2: weight (in, out)
        return w.shape[0]
    raise ValueError(
        f"protocol='decomposition' pads e to FC2's input width, but {name} ({type(module).__name__}) "
        "exposes no in_features: map FC2 to an nn.Linear"
    )


class Capture:
    """The state of one measurement: hooks, accumulators; use through :func:`capture`.

    Attributes: ``components`` (labels), ``layers`` (layer labels, block order), ``modules``
    (``{label: {layer: module names}}``), ``n_forwards`` (root forward passes seen).
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
        proj_name: str | None = None
        if components is None:
            p = _presets.detect(model)
            components, proj_name = p.components, p.proj
            embedding = embedding if embedding is not None else p.embedding
            self.preset: str | None = p.name
        else:
            if not isinstance(components, Mapping) or not components:
                raise ValueError("components must be a non-empty mapping {label: module-name pattern}")
            self.preset = None
        order = [c for c in _presets.COMPONENTS if c in components]
        order += [c for c in components if c not in order]
        self.components: tuple[str, ...] = tuple(order)
        layer_keys, self.modules = _presets.resolve(model, {c: components[c] for c in order})
        self._layer_index = {k: i for i, k in enumerate(layer_keys)}
        self.layers: tuple[str, ...] = tuple(".".join(k) or "0" for k in layer_keys)
        self._named = dict(model.named_modules())
        self._token_slice = self._make_token_slice(prefix_tokens)
        self.embedding = embedding
        if protocol == "decomposition":
            if embedding is None:
                raise ValueError(
                    "protocol='decomposition' needs embedding='<module name>' (its output is e) or "
                    "'<module name>:input' (its first input is e), e.g. 'blocks.0:input'"
                )
            name, _, which = embedding.partition(":")
            if which not in ("", "input"):
                raise ValueError(
                    f"embedding must be '<module name>' or '<module name>:input', got {embedding!r}"
                )
            found = _presets.match(name, self._named)
            if len(found) != 1:
                raise ValueError(
                    f"embedding {embedding!r} must match exactly one module, matched {len(found)}"
                )
            self._embedding_module = next(iter(found.values()))
            self._embedding_is_input = which == "input"
        self._heads: dict[int, tuple[str, int]] = {}  # layer index -> (proj module name, heads)
        if self.per_head:
            self._find_heads(proj_name)
        # runtime state
        self._handles: list[Any] = []
        # rows (component * L + layer, s_in (P,), s_out (P,)) of the running forward; statistics are
        # computed for all of them at once when it ends (a few launches per forward, not per hook)
        self._rows: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        self._head_rows: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (layer, s_in (P,), (H, P))
        self._acc: torch.Tensor | None = None  # (C * L, F) float64 sums
        self._index_cache: dict[tuple, torch.Tensor] = {}
        self._head_acc: torch.Tensor | None = None  # (L, H, F)
        self._pending: dict[tuple[int, int], list[Any]] = {}
        self._pending_heads: dict[int, torch.Tensor] = {}
        # id(tensor) -> (weak reference, its per-pair sums, its version counter when reduced)
        self._cache: dict[int, tuple[weakref.ref, torch.Tensor, int]] = {}
        self._e: torch.Tensor | None = None
        self._s_e: torch.Tensor | None = None
        self._extra_call = False  # inside a decomposition call of a component on e
        self.n_forwards = 0
        self.n_fired = 0
        self.attached = False

    # ---------------------------------------------------------------- setup helpers
    def _make_token_slice(self, prefix_tokens: int | None) -> slice | None:
        if self.tokens == "all":
            return None
        if prefix_tokens is None:
            m = getattr(self.model, "_orig_mod", self.model)
            prefix_tokens = getattr(m, "num_prefix_tokens", None)
        if not isinstance(prefix_tokens, int):
            raise ValueError(
                f"tokens={self.tokens!r} needs the number of prefix tokens (class/register tokens before "
                "the patches): the model has no num_prefix_tokens attribute, pass prefix_tokens=N"
            )
        if prefix_tokens < 0:
            raise ValueError(f"prefix_tokens must be >= 0, got {prefix_tokens}")
        if self.tokens == "cls":
            if prefix_tokens < 1:
                raise ValueError("tokens='cls' but the model has no prefix (class) token")
            return slice(0, 1)
        return slice(prefix_tokens, None)

    def _find_heads(self, proj_name: str | None) -> None:
        if "MHA" not in self.modules:
            raise ValueError("per_head=True needs an 'MHA' component")
        for key, names in self.modules["MHA"].items():
            mha = self._named[names[0]]
            heads = _num_heads(mha)
            sub = dict(mha.named_modules())
            cands = [proj_name] if proj_name else list(_PROJ_NAMES)
            proj = next((c for c in cands if c in sub), None)
            if heads is None or proj is None:
                raise ValueError(
                    f"per_head=True: could not find the head count (attributes {_HEAD_ATTRS}) or the output "
                    f"projection (one of {cands}) inside {names[0]} ({type(mha).__name__})"
                )
            self._heads[self._layer_index[key]] = (f"{names[0]}.{proj}", heads)

    # ---------------------------------------------------------------- attach / detach
    def attach(self) -> Capture:
        """Registers the hooks (what entering the with-block does)."""
        if self.attached:
            raise RuntimeError("this capture is already attached")
        h = self._handles
        h.append(self.model.register_forward_pre_hook(self._on_root_start))
        h.append(self.model.register_forward_hook(self._on_root_end, always_call=True))
        ci_of = {c: i for i, c in enumerate(self.components)}
        for c, per_layer in self.modules.items():
            for key, names in per_layer.items():
                li = self._layer_index[key]
                for name in names:
                    mod = self._named[name]
                    if self.protocol == "in_situ":
                        fn = functools.partial(self._in_situ_hook, ci_of[c], li, len(names), name)
                        h.append(mod.register_forward_hook(fn, with_kwargs=True))
                    else:
                        pad = _in_width(mod, name) if c == "FC2" else None
                        fn = functools.partial(self._decomposition_hook, ci_of[c], li, len(names), name, pad)
                        h.append(mod.register_forward_pre_hook(fn, with_kwargs=True))
        if self.protocol == "decomposition":
            emb = self._named[self._embedding_module]
            if self._embedding_is_input:
                h.append(emb.register_forward_pre_hook(self._on_embedding_input, with_kwargs=True))
            else:
                h.append(emb.register_forward_hook(self._on_embedding_output))
        for li, (proj, heads) in self._heads.items():
            fn = functools.partial(self._proj_hook, li, heads, proj)
            h.append(self._named[proj].register_forward_pre_hook(fn))
        self.attached = True
        return self

    def detach(self) -> None:
        """Removes every hook and drops per-forward state; the accumulated sums stay."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._flush()
        self._clear_forward_state()
        self.attached = False

    def __enter__(self) -> Capture:
        return self.attach()

    def __exit__(self, *exc) -> None:
        self.detach()

    def _clear_forward_state(self) -> None:
        self._cache.clear()
        self._pending.clear()
        self._pending_heads.clear()
        self._e = None
        self._s_e = None

    # ---------------------------------------------------------------- reductions
    def _view(self, t: torch.Tensor, where: str) -> torch.Tensor:
        t = t.detach()
        if t.dim() < 2:
            raise ValueError(f"{where}: expected a (N, ...) activation with N sequences first, got shape "
                             f"{tuple(t.shape)}")
        self.pairing.check(t.shape[0], where)
        if self._token_slice is not None:
            if t.dim() < 3:
                raise ValueError(f"tokens={self.tokens!r}: {where} has shape {tuple(t.shape)}, no token dim")
            t = t[:, self._token_slice]
            if t.shape[1] == 0:
                raise ValueError(f"tokens={self.tokens!r}: no token of {where} is left after the "
                                 f"{self._token_slice.start} prefix tokens (prefix_tokens)")
        return t

    def _sums(self, tensors: list[torch.Tensor], where: str, cache: bool = True) -> list[torch.Tensor]:
        """Per-pair sums of each tensor, reduced once per distinct tensor (identity cache)."""
        out: list[torch.Tensor | None] = [None] * len(tensors)
        todo: list[int] = []
        for i, t in enumerate(tensors):
            hit = self._cache.get(id(t)) if cache else None
            if hit is not None and hit[0]() is t and hit[2] == _version(t):  # same object, unmodified
                out[i] = hit[1]
            elif not any(tensors[j] is t for j in todo):
                todo.append(i)
        if todo:
            sums = self.pairing.sq_sums([self._view(tensors[i], where) for i in todo], backend=self.backend)
            for j, i in enumerate(todo):
                out[i] = sums[j]
                if cache:
                    self._cache[id(tensors[i])] = (weakref.ref(tensors[i]), sums[j], _version(tensors[i]))
        for i, t in enumerate(tensors):  # duplicates inside this call
            if out[i] is None:
                out[i] = out[next(j for j in todo if tensors[j] is t)]
        return out  # type: ignore[return-value]

    def _index(self, rows: list[int], device: torch.device) -> torch.Tensor:
        """Row indices on the device, cached: the same forward gives the same rows (one copy ever)."""
        key = (tuple(rows), device)
        idx = self._index_cache.get(key)
        if idx is None:
            idx = self._index_cache[key] = torch.tensor(rows, dtype=torch.long, device=device)
        return idx

    def _scatter_add(
        self, acc: torch.Tensor | None, size: int, rows: list[int], st: torch.Tensor
    ) -> torch.Tensor:
        """``acc[rows] += st`` out of place (safe for inference tensors), deterministic: each pass adds
        to distinct rows only (no two atomic adds to one address)."""
        if acc is None:
            acc = torch.zeros((size, *st.shape[1:]), dtype=torch.float64, device=st.device)
        passes: list[list[int]] = []
        for k, r in enumerate(rows):
            for p in passes:
                if all(rows[j] != r for j in p):
                    p.append(k)
                    break
            else:
                passes.append([k])
        for p in passes:
            idx = self._index([rows[k] for k in p], st.device)
            sel = st if len(p) == len(rows) else st[self._index(p, st.device)]
            acc = acc.index_add(0, idx, sel)
        return acc

    def _flush(self) -> None:
        """Turns the rows of the running forward into statistics and adds them to the accumulators."""
        n_rows = len(self.components) * len(self.layers)
        for rows, heads in ((self._rows, False), (self._head_rows, True)):
            by_p: dict[int, list[tuple[int, torch.Tensor, torch.Tensor]]] = {}
            for row in rows:
                by_p.setdefault(row[1].shape[-1], []).append(row)
            rows.clear()
            for group in by_p.values():
                keys = [k for k, _, _ in group]
                s_in = torch.stack([a for _, a, _ in group])
                s_out = torch.stack([b for _, _, b in group])
                if heads:  # (K, H, P) against the MHA input (K, 1, P)
                    st = self.pairing.stats(s_in.unsqueeze(1), s_out)
                    self._head_acc = self._scatter_add(self._head_acc, len(self.layers), keys, st)
                else:
                    st = self.pairing.stats(s_in, s_out)
                    self._acc = self._scatter_add(self._acc, n_rows, keys, st)

    def _add(self, ci: int, li: int, nparts: int, s_in: torch.Tensor, s_out: torch.Tensor) -> None:
        self.n_fired += 1
        if nparts > 1:  # a component made of several modules sharing the input (SwiGLU fc1_g + fc1_x)
            p = self._pending.get((ci, li))
            if p is None:
                self._pending[(ci, li)] = p = [s_in, s_out, 1]
            else:
                p[1], p[2] = p[1] + s_out, p[2] + 1
            if p[2] < nparts:
                return
            del self._pending[(ci, li)]
            s_out = p[1]
        self._rows.append((ci * len(self.layers) + li, s_in, s_out))
        if self.components[ci] == "MHA" and li in self._pending_heads:
            self._head_rows.append((li, s_in, self._pending_heads.pop(li)))  # heads: (H, P)

    # ---------------------------------------------------------------- hooks
    @_eager
    def _on_root_start(self, module, args) -> None:
        self.n_forwards += 1
        self._flush()
        self._clear_forward_state()

    @_eager
    def _on_root_end(self, module, args, output) -> None:
        self._flush()
        self._clear_forward_state()

    @_eager
    def _in_situ_hook(self, ci, li, nparts, name, module, args, kwargs, output) -> None:
        if self._extra_call:
            return
        x, y = _input_of(args, kwargs), _first_tensor(output)
        if x is None or y is None:
            raise TypeError(
                f"capture: {name} ({type(module).__name__}) has no tensor input or output to measure"
            )
        s_in, s_out = self._sums([x, y], name)
        self._add(ci, li, nparts, s_in, s_out)

    def _set_embedding(self, e: torch.Tensor | None, name: str) -> None:
        if e is None:
            raise TypeError(f"capture: embedding {name} has no tensor to use as e")
        self._e = e.detach()
        self._s_e = self._sums([self._e], f"embedding {name}", cache=False)[0]

    @_eager
    def _on_embedding_input(self, module, args, kwargs) -> None:
        if not self._extra_call:
            self._set_embedding(_input_of(args, kwargs), self._embedding_module)

    @_eager
    def _on_embedding_output(self, module, args, output) -> None:
        if not self._extra_call:
            self._set_embedding(_first_tensor(output), self._embedding_module)

    @_eager
    def _decomposition_hook(self, ci, li, nparts, name, pad, module, args, kwargs) -> None:
        if self._extra_call:
            return
        e = self._e
        if e is None:
            raise RuntimeError(
                f"protocol='decomposition': {name} ran before the embedding {self.embedding!r} produced e "
                "(pass embedding= naming the module whose output, or ':input', enters the first layer)"
            )
        if pad is not None:
            if pad < e.shape[-1]:
                raise ValueError(
                    f"{name} takes {pad} channels, fewer than e's {e.shape[-1]}: cannot zero-pad"
                )
            e = torch.nn.functional.pad(e, (0, pad - e.shape[-1]))
        # e replaces the input everywhere it is passed (self-attention: query = key = value)
        x = _input_of(args, kwargs)
        args = tuple(e if a is x else a for a in args) if args else (e,)
        kwargs = {k: (e if v is x else v) for k, v in kwargs.items()}
        self._extra_call = True
        # in train mode the extra call may draw random numbers (dropout): fork the generators so the
        # real forward draws exactly what it would without capture
        devices = [e.device] if e.device.type == "cuda" else []
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=devices, enabled=module.training):
                y = _first_tensor(module(*args, **kwargs))
        finally:
            self._extra_call = False
        if y is None:
            raise TypeError(f"capture: {name} ({type(module).__name__}) returned no tensor")
        s_out = self._sums([y], name, cache=False)[0]
        del y, e
        self._add(ci, li, nparts, self._s_e, s_out)

    @_eager
    def _proj_hook(self, li, heads, name, module, args) -> None:
        if (self.protocol == "decomposition") != self._extra_call:
            return  # in_situ: the real forward only; decomposition: the call on e only
        t = _input_of(args, {})
        if t is None or t.shape[-1] % heads:
            raise ValueError(f"per_head=True: the input of {name} must be (N, n, H*dh) with H = {heads}, "
                             f"got {None if t is None else tuple(t.shape)}")
        dh = t.shape[-1] // heads
        v = self._view(t, name)
        chunks = [v[..., h * dh : (h + 1) * dh] for h in range(heads)]
        self._pending_heads[li] = self.pairing.sq_sums(chunks, backend=self.backend)

    # ---------------------------------------------------------------- result
    def result(self) -> PlasticityResult:
        """The accumulated statistics (no host-device sync). Raises when nothing was measured."""
        self._flush()  # rows of a forward whose root hooks did not run (a submodule called directly)
        if self._acc is None:
            if self.n_forwards == 0:
                raise RuntimeError(
                    "nothing was measured: no forward pass of the model ran inside capture(...); call "
                    "model(x) inside the with-block"
                )
            raise RuntimeError(
                f"nothing was measured: {self.n_forwards} forward pass(es) ran but no component hook fired. "
                "If the model was torch.compile'd before capture, the compiled code ignores hooks added "
                "later: capture the uncompiled model and compile it inside the with-block, or run "
                "torch._dynamo.reset() after attaching the capture so that it recompiles with the hooks."
            )
        if self.per_head and self._head_acc is None:
            warnings.warn(
                f"per_head=True but no output projection ({sorted({p for p, _ in self._heads.values()})[:2]}"
                "...) was called as a module (nn.MultiheadAttention, for one, uses its weights directly): "
                "the result has no per-head rates",
                stacklevel=2,
            )
        stats = self._acc.view(len(self.components), len(self.layers), self._acc.shape[-1])
        heads = self._head_acc
        meta = {"protocol": self.protocol, "pairs": self.pairing.name, "tokens": self.tokens,
                "model": type(getattr(self.model, "_orig_mod", self.model)).__name__,
                "preset": self.preset, "forwards": self.n_forwards}
        return PlasticityResult(stats, self.components, self.layers, heads=heads, meta=meta)

    def reset(self) -> None:
        """Forgets the accumulated sums (the hooks stay)."""
        self._acc = self._head_acc = None
        self._rows.clear()
        self._head_rows.clear()
        self._clear_forward_state()
        self.n_forwards = self.n_fired = 0


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
) -> Capture:
    """A :class:`Capture` of ``model``'s components; hooks attach when the with-block is entered.

    Args:
        model: any ``nn.Module``; inputs are ``(N, ...)`` with ``N`` sequences first.
        protocol: ``"in_situ"`` (the real forward) or ``"decomposition"`` (every component on ``e``).
        pairs: ``"halves"``: a batch of ``2B``, sequence ``i`` paired with ``i + B`` (matched pairs:
            ``model(torch.cat([X, Y]))``); ``"all"``: every distinct pair ``i < j`` of the batch.
        components: ``{label: module-name glob or tuple of globs}`` (``*`` = layer index, ``**`` = any
            prefix); default: detected from the presets (timm ViT/DeiT/Eva/DINOv2/DINOv3, SwiGLU,
            HF ViT, BERT, GPT-2; see :mod:`vitplast_kernels.presets`).
        embedding: decomposition only: the module whose output is ``e`` or ``"<name>:input"``.
        per_head: also measure per-head MHA rates (see the module docstring).
        tokens: ``"all"``, ``"cls"`` (token 0) or ``"patches"`` (after ``prefix_tokens``).
        prefix_tokens: class/register tokens before the patches (default ``model.num_prefix_tokens``).
        backend: the paired op's backend (``"auto"``, ``"cpu"``, ``"torch"``, GPU backends).
    """
    return Capture(model, protocol=protocol, pairs=pairs, components=components, embedding=embedding,
                   per_head=per_head, tokens=tokens, prefix_tokens=prefix_tokens, backend=backend)
