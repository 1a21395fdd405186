"""Generators and checks of the property-based tests (``tests/test_properties.py``).

Every generated input is a :class:`Case`: the value, the names of the fields it
breaks (empty for a valid input) and whether it must be refused. A value whose
*type* a field cannot take (read from the field's annotation, :func:`fits`), a
NaN, ``-inf``, a string outside every field's choices or an unknown key must be
refused; a value of the right type outside its range (0, -1, inf, ...) may be
accepted or refused. A refusal is a ``ValueError`` (``SpecError`` included)
whose message names one of the broken fields (:func:`refused`); anything else
raised is a bug of the library.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from dataclasses import dataclass, fields
from typing import Any, Callable

import numpy as np
import torch
from hypothesis import strategies as st

from bnnzoo.inference import ENGINES
from bnnzoo.inference.engines import DRIVER_OPTIONS
from bnnzoo.models import ACTIVATIONS, LIKELIHOODS, PRIORS, BNNSpec, Conv2d
from bnnzoo.models.spec import LAYERS


@dataclass(frozen=True)
class Case:
    """A generated input: ``value``; ``fields``, the names a refusal must name (one of);
    ``must_refuse``, whether some field is certainly wrong."""

    value: Any
    fields: tuple[str, ...] = ()
    must_refuse: bool = False

    def also(self, other: "Case") -> "Case":
        """Both cases' faults (the value is ``self``'s)."""
        return Case(self.value, self.fields + other.fields, self.must_refuse or other.must_refuse)


# ------------------------------------------------------------------ checks
def names(message: str, name: str) -> bool:
    """``name`` appears in ``message`` as a whole word (``x`` in ``"x has 3 rows"``, not in ``"max"``)."""
    return re.search(rf"(?<![\w]){re.escape(name)}(?!\w)", message) is not None


def refused(call: Callable[[], Any], case: Case, final: bool = True) -> tuple[bool, Any]:
    """``(True, None)`` when ``call()`` refuses ``case`` with a ValueError naming one of its
    fields, ``(False, result)`` when it accepts; any other exception propagates. A valid case
    must be accepted; a case that ``must_refuse`` refused, unless a later stage may refuse it
    (``final=False``)."""
    try:
        result = call()
    except ValueError as err:  # SpecError is a ValueError
        message = str(err)
        assert case.fields, f"a valid input was refused: {type(err).__name__}: {message}"
        assert any(names(message, f) for f in case.fields), \
            f"{type(err).__name__} names none of {case.fields}: {message}"
        return True, None
    assert not (final and case.must_refuse), f"accepted an input that breaks {case.fields}: {case.value!r}"
    return False, result


def assert_draws(run, num_chains: int, num_samples: int) -> None:
    """Every site ``[chain, draw, *shape]`` (the spec's shapes for weights and biases), every
    statistic ``[chain, draw]``; a non-finite draw only where the run counts a divergence or a
    skipped VI step."""
    for site, shape in run.model.spec.param_shapes().items():
        assert run.samples[site].shape == (num_chains, num_samples, *shape), site
    for name, value in {**run.samples, **run.sample_stats}.items():
        assert np.shape(value)[:2] == (num_chains, num_samples), (name, np.shape(value))
    bad = sum(int((~np.isfinite(v)).sum()) for v in run.samples.values())
    counted = int(np.sum(run.sample_stats.get("diverging", 0)))
    if run.vi is not None and run.vi.skipped_steps is not None:
        counted += int(np.sum(run.vi.skipped_steps))
    assert bad == 0 or counted > 0, f"{bad} non-finite draws, no divergence or skipped step counted"


# ------------------------------------------------------------------ values and types
NAN = float("nan")
#: what a field is perturbed to: TOML-representable values first. The table names no known kind,
#: so that only a field of tables (``priors``, a VI ``optimizer``) may take it
TOML_POOL = (NAN, math.inf, -math.inf, -1, 0, 2, -0.5, 0.5, 2.5, True, False, "zero", "", [1], {"kind": "zero"})
POOL = TOML_POOL + (None, np.int64(2), np.float32(0.5))
#: free-text fields, where any string is valid
FREE_TEXT = ("name",)


def _members(annotation: str) -> list[str]:
    """The members of a union annotation, split at ``|`` outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(annotation):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "|" and depth == 0:
            parts.append(annotation[start:i].strip())
            start = i + 1
    return parts + [annotation[start:].strip()]


def fits(annotation: Any, value: Any) -> bool:
    """Whether a field annotated ``annotation`` (a string: the modules use postponed
    annotations) takes values of ``value``'s type, whatever their range."""
    text = str(annotation)
    if text in ("Any", "typing.Any"):
        return True
    for member in _members(text):
        base, _, args = member.partition("[")
        base = base.rsplit(".", 1)[-1]
        if value is None and base == "None" \
                or isinstance(value, bool) and base == "bool" \
                or isinstance(value, numbers.Integral) and not isinstance(value, bool) and base in ("int", "float") \
                or isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral)) \
                and base == "float" \
                or isinstance(value, str) and base == "str" \
                or isinstance(value, dict) and base in ("dict", "Mapping"):
            return True
        if isinstance(value, (list, tuple)) and base in ("tuple", "list", "Sequence"):
            items = [a for a in _members(args.rstrip("]").replace(",", "|")) if a and a != "..."] if args else []
            return not items or all(any(fits(a, v) for a in items) for v in value)
    return False


def bad(annotation: Any, value: Any, free_text: bool = False) -> bool:
    """Certainly wrong for a field annotated ``annotation``: the wrong type, NaN, -inf, or a
    string (the generated strings are never one of a field's choices) outside free text."""
    if isinstance(value, str):
        return not free_text
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and (math.isnan(value) or value == -math.inf):
        return True
    return not fits(annotation, value)


def typo(name: str) -> st.SearchStrategy[str]:
    """A misspelling of ``name``: a letter doubled, two swapped or one dropped (where a swap changes
    nothing); a one-letter name (``L``) doubled."""
    def spell(i: int, how: int) -> str:
        if len(name) < 2:
            return name + name
        i = i % (len(name) - 1)
        wrong = name[:i] + name[i] + name[i:] if how == 0 else name[:i] + name[i + 1] + name[i] + name[i + 2:]
        return wrong if wrong != name else name[:i] + name[i + 1:]
    return st.builds(spell, st.integers(0, 63), st.integers(0, 1))


def misspelled(name: str, valid) -> st.SearchStrategy[str]:
    """A misspelling of ``name`` that is none of ``valid``."""
    return typo(name).filter(lambda s: s not in valid)


def perturbed(annotation: Any, name: str, pool=POOL) -> st.SearchStrategy[Case]:
    """A field ``name`` set to a value from ``pool``: the case of that fault."""
    return st.sampled_from(pool).map(lambda v: Case(v, (name,), bad(annotation, v, name in FREE_TEXT)))


# ------------------------------------------------------------------ run-level counts
#: count -> (minimum, values valid for every engine)
RUN_COUNTS = {"num_samples": (1, (1, 2, 3)), "warmup_steps": (0, (0, 1, 2)), "num_chains": (1, (2, 3)),
          "seed": (0, (0, 7))}
#: besides POOL: a chain count ChEES refuses, a string; seeds past numpy's and torch's limits
COUNT_POOL = (1, "2")
SEED_POOL = (2**32 - 1, 2**32, 2**62)


def count_case(name: str, pool=POOL + COUNT_POOL) -> st.SearchStrategy[Case]:
    """A run-level count: valid for every engine, or any value of ``pool`` (a fault of ``name``;
    certain unless an integer at least the count's minimum); seeds also from :data:`SEED_POOL`."""
    minimum, safe = RUN_COUNTS[name]
    pool = pool + SEED_POOL if name == "seed" else pool

    def case(value) -> Case:
        if not isinstance(value, bool) and isinstance(value, numbers.Integral) and value in safe:
            return Case(value)
        ok = not isinstance(value, bool) and isinstance(value, numbers.Integral) and value >= minimum
        return Case(value, (name,), not ok)
    return st.one_of(st.sampled_from(safe), st.sampled_from(pool)).map(case)


# ------------------------------------------------------------------ engine options
#: options that keep a tiny run short (leapfrog steps, tree depth, VI steps, cycle length)
SHORT = {"nuts": {"max_tree_depth": 3}, "hmc": {"num_steps": 3}, "fixed_hmc": {"num_steps": 3},
         "chees": {"max_leapfrog_steps": 5}, "proximal_hmc": {"num_steps": 3, "inner_steps": 2},
         "svi": {"num_steps": 5}, "sghmc_group_ss": {"cycle_length": 2}}
#: valid values of options beyond their defaults (never compile=True: torch.compile takes minutes)
CHOICES = {"chain_method": ("vectorized", "sequential"), "compile": (False,)}
#: the prior an engine needs on the model (the rest: Gaussian)
ENGINE_PRIOR = {"proximal_hmc": "laplace", "sgld_sa": "spike_and_slab", "sghmc_sa": "spike_and_slab",
                "sghmc_group_ss": "group_spike_and_slab"}


def option_types(engine: str) -> dict[str, str]:
    """Option -> annotation of ``engine``'s options (the driver's included)."""
    spec = ENGINES[engine]
    types = {f.name: str(f.type) for f in fields(spec.options_cls)}
    types.update({k: type(default).__name__ for k, (default, _, _) in DRIVER_OPTIONS.items()})
    types["compile"] = "bool | str"  # True, False or "auto" (a generated string is never "auto")
    return {k: types[k] for k in spec.defaults()}


@st.composite
def engine_options(draw, engine: str, pool=POOL) -> Case:
    """Options of ``engine``: some of its defaults given explicitly, :data:`SHORT`, valid driver
    choices, then one or two options perturbed, or a misspelled option added."""
    defaults, types = ENGINES[engine].defaults(), option_types(engine)
    given = {k: v for k, v in defaults.items() if draw(st.booleans()) and v is not None or k in SHORT.get(engine, {})}
    given.update(SHORT.get(engine, {}))
    given.update({k: draw(st.sampled_from(CHOICES[k])) for k in ENGINES[engine].driver if k in CHOICES})
    faults: dict[str, Case] = {}  # option -> its fault (the last one drawn)
    for _ in range(draw(st.integers(0, 2))):
        if draw(st.integers(0, 4)) == 0:  # an unknown option: a typo of a known one
            valid = set(defaults) | {"num_samples", "warmup_steps", "num_chains", "seed", "progress"}
            key = draw(misspelled(draw(st.sampled_from(sorted(defaults))), valid))
            faults[key] = Case(1, (key,), True)
        else:
            key = draw(st.sampled_from(sorted(defaults)))
            faults[key] = draw(perturbed(types[key], key, pool))
            if key == "compile" and faults[key].value is True:  # valid, but a compile takes minutes: CHOICES
                faults[key] = Case(False)
    given.update({k: f.value for k, f in faults.items()})
    faulty = [f for f in faults.values() if f.fields]
    return Case(given, tuple(k for f in faulty for k in f.fields), any(f.must_refuse for f in faulty))


# ------------------------------------------------------------------ model specs
POSITIVE = st.sampled_from([0.3, 1.0, 2.0])
PROBABILITY = st.sampled_from([0.2, 0.5, 0.9])


@st.composite
def prior_tables(draw) -> Any:
    """A valid prior: a bare kind or a table with valid parameters."""
    kind = draw(st.sampled_from(sorted(PRIORS)))
    params = {
        "gaussian": {"scale": POSITIVE}, "laplace": {"scale": POSITIVE}, "horseshoe": {"global_scale": POSITIVE},
        "spike_and_slab": {"v0": st.sampled_from([0.05, 0.1]), "v1": POSITIVE, "sigma": POSITIVE,
                           "inclusion_prob": PROBABILITY, "spike": st.sampled_from(["laplace", "gaussian"])},
        "group_spike_and_slab": {"slab_scale": POSITIVE, "spike_scale": st.sampled_from([0.01, 0.1]),
                                 "inclusion_prob": PROBABILITY, "group": st.sampled_from(["auto", "input", "output"])},
    }[kind]
    if draw(st.booleans()):
        return kind
    return {"kind": kind, **{k: draw(v) for k, v in params.items() if draw(st.booleans())}}


@st.composite
def dense_table(draw, units: st.SearchStrategy[int] = st.integers(1, 3)) -> dict:
    table = {"units": draw(units)}
    if draw(st.booleans()):
        table["activation"] = draw(st.sampled_from(ACTIVATIONS))
    if draw(st.booleans()):
        table["bias"] = draw(st.booleans())
    return table


@st.composite
def spec_tables(draw, task: str | None = None, input_dim: int | None = None) -> dict:
    """A valid model table: an optional Conv2d block, 0-2 hidden Dense layers, a last layer
    that fits the likelihood, a prior, per-site overrides. ``task`` and ``input_dim`` pin them
    (a run file on a fixed data set)."""
    kinds = {"regression": ["gaussian", "learned"], "classification": ["bernoulli", "categorical"]}
    likelihood = draw(st.sampled_from(kinds[task] if task else kinds["regression"] + kinds["classification"]))
    table: dict[str, Any] = {"layers": []}
    if input_dim is None and draw(st.integers(0, 3)) == 0:
        c, h, w = draw(st.integers(1, 2)), draw(st.integers(3, 5)), draw(st.integers(3, 5))
        conv = {"channels": draw(st.integers(1, 2)), "kernel_size": draw(st.integers(1, 3)),
                "stride": draw(st.integers(1, 2)), "padding": draw(st.integers(0, 1))}
        if draw(st.booleans()):
            conv["kind"] = "conv2d"
        if draw(st.booleans()):
            conv["activation"] = draw(st.sampled_from(ACTIVATIONS))
        if min(Conv2d(**{k: v for k, v in conv.items() if k != "kind"}).output_shape((c, h, w))[1:]) >= 2 \
                and draw(st.booleans()):
            conv["pool"] = 2
        table["input_shape"] = [c, h, w]
        if draw(st.booleans()):
            table["input_dim"] = c * h * w
        table["layers"].append(conv)
    else:
        table["input_dim"] = input_dim or draw(st.integers(1, 3))
    table["layers"] += draw(st.lists(dense_table(), max_size=2))
    outputs = draw(st.integers(2, 3)) if likelihood == "categorical" else 1
    table["layers"].append(draw(dense_table(st.just(outputs))))
    table["prior"] = draw(prior_tables())
    if draw(st.integers(0, 2)) == 0:
        site = draw(st.sampled_from([f"layers.{len(table['layers']) - 1}", "layers.0.weight"]))
        table["priors"] = {site: draw(prior_tables())}
    table["likelihood"] = {
        "gaussian": {"kind": "gaussian", "noise": draw(st.sampled_from([0.1, 0.5]))},
        "learned": {"kind": "gaussian", "noise": "learned", "noise_prior": [2.0, draw(POSITIVE)]},
        "bernoulli": draw(st.sampled_from(["bernoulli", {"kind": "bernoulli"}])),
        "categorical": {"kind": "categorical"},
    }[likelihood]
    if draw(st.booleans()):
        table["name"] = "tiny"
    return table


#: every key of a model table: its fields, those of layers, priors and likelihoods
KNOWN_KEYS = {*BNNSpec.KEYS, "kind", *(f.name for cls in (*LAYERS.values(), *PRIORS.values(), *LIKELIHOODS.values())
                                      for f in fields(cls))}


def field_name(path: tuple) -> str:
    """How a spec error names the field at ``path``: ``("layers", 1, "units")`` -> ``layers[1].units``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _annotation(table: dict, path: tuple) -> str:
    """The annotation of the spec field at ``path`` (tables of layers, priors and likelihoods by kind)."""
    *where, key = path
    if not where:
        return next(str(f.type) for f in fields(BNNSpec) if f.name == key)
    if key == "kind":
        return "str"
    holder = _get(table, tuple(where))
    if where[0] == "layers":
        cls = LAYERS[holder.get("kind", "conv2d" if "channels" in holder else "dense")]
    else:
        cls = (LIKELIHOODS if where[0] == "likelihood" else PRIORS)[holder["kind"]]
    return next(str(f.type) for f in fields(cls) if f.name == key)


def _get(table: Any, path: tuple) -> Any:
    for part in path:
        table = table[part]
    return table


def _copy(table: Any) -> Any:
    return json.loads(json.dumps(table))  # the tables hold plain JSON values (NaN included)


def _set(table: dict, path: tuple, value: Any) -> dict:
    out = _copy(table)
    _get(out, path[:-1])[path[-1]] = value
    return out


def _leaves(table: dict) -> list[tuple]:
    """Paths of every field: top-level keys, each layer's fields, the parameters of every prior
    and likelihood table."""
    paths = [(k,) for k in table]
    paths += [("layers", i, k) for i, layer in enumerate(table["layers"]) for k in layer]
    paths += [("prior", k) for k in table["prior"]] if isinstance(table["prior"], dict) else []
    paths += [("priors", s, k) for s, p in table.get("priors", {}).items() if isinstance(p, dict) for k in p]
    paths += [("likelihood", k) for k in table["likelihood"]] if isinstance(table["likelihood"], dict) else []
    return paths


@st.composite
def spec_cases(draw, pool=POOL, **pins) -> Case:
    """A model table (:func:`spec_tables`), valid or with one fault: a field set to a value of
    ``pool``, a key misspelled, a required key dropped, or a cross-field error (last layer
    against the likelihood, a Conv2d after a Dense layer, an image that shrinks to nothing, a
    grouping that does not apply, an override of a site that does not exist)."""
    table = draw(spec_tables(**pins))
    last = len(table["layers"]) - 1
    fault = draw(st.sampled_from(["none", "value", "value", "value", "typo", "drop", "cross"]))
    if fault == "none":
        return Case(table)
    if fault == "value":
        path = draw(st.sampled_from(_leaves(table)))
        case = draw(perturbed(_annotation(table, path), field_name(path), pool))
        return Case(_set(table, path, case.value), case.fields, case.must_refuse)
    if fault == "typo":
        holders = [()] + [("layers", i) for i in range(last + 1)] + [(k,) for k in ("prior", "likelihood", "priors")
                                                                     if isinstance(table.get(k), dict)]
        where = draw(st.sampled_from(holders))
        holder = _get(table, where)
        keys = sorted(k for k in holder if not (k == "kind" and where and where[0] != "layers"))
        if not keys:
            return Case(table)
        wrong = draw(misspelled(key := draw(st.sampled_from(keys)), KNOWN_KEYS))
        out = _copy(table)
        renamed = {wrong if k == key else k: v for k, v in holder.items()}
        if where:
            _get(out, where[:-1])[where[-1]] = renamed
        else:
            out = renamed
        return Case(out, (field_name(where + (wrong,)),), True)
    if fault == "drop":
        required = [("layers",), ("layers", last, "units")]
        required.append(("input_shape",) if "input_shape" in table else ("input_dim",))
        required += [(k, "kind") for k in ("prior", "likelihood") if isinstance(table[k], dict)]
        path = draw(st.sampled_from(required))
        out = _copy(table)
        del _get(out, path[:-1])[path[-1]]
        return Case(out, (field_name(path),), True)
    # cross-field
    choices = ["units", "site"]
    if "input_shape" in table:
        choices += ["conv_after_dense", "shrink"]
    if isinstance(table["prior"], dict) and table["prior"]["kind"] == "group_spike_and_slab":
        choices.append("group")
    how = draw(st.sampled_from(choices))
    if how == "units":
        units = 1 if table["layers"][last]["units"] > 1 else draw(st.sampled_from([2, 3]))  # categorical needs >= 2
        return Case(_set(table, ("layers", last, "units"), units), (f"layers[{last}].units",), True)
    if how == "site":
        return Case(_set(table, ("priors",), {"layers.9.weight": "gaussian"}), ("priors.layers.9.weight",), True)
    if how == "conv_after_dense":
        out = _copy(table)
        out["layers"].append({"channels": 1})
        return Case(out, (f"layers[{last + 1}]",), True)
    if how == "shrink":
        c, h, w = table["input_shape"]
        size = max(h, w) + 2 * table["layers"][0]["padding"] + 1
        return Case(_set(table, ("layers", 0, "kernel_size"), size), ("layers[0].kernel_size", "layers[0]"), True)
    out = _set(table, ("prior", "group"), "kernel")  # on the last Dense weight at least: no override
    out.pop("priors", None)
    return Case(out, ("prior.group",), True)


def tiny_data(spec: BNNSpec, n: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)`` of ``n`` rows that fit ``spec``: labels cycle through the classes."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, spec.num_inputs, generator=g)
    if spec.num_classes:
        return x, torch.arange(n) % spec.num_classes
    return x, torch.randn(n, generator=g)


# ------------------------------------------------------------------ TOML
def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items() if v is not None) + "}"
    raise TypeError(f"no TOML for {value!r}")


def toml_text(doc: dict) -> str:
    """``doc`` as TOML: plain keys first, a ``[table]`` per dict, ``[[table]]`` per list of dicts
    (``None`` values left out: TOML has none)."""
    def body(table: dict) -> list[str]:
        return [f"{_key(k)} = {_value(v)}" for k, v in table.items() if v is not None]

    tables = {k: v for k, v in doc.items() if isinstance(v, dict)}
    arrays = {k: v for k, v in doc.items() if isinstance(v, list) and v and all(isinstance(t, dict) for t in v)}
    lines = body({k: v for k, v in doc.items() if k not in tables and k not in arrays})
    for k, v in tables.items():
        lines += [f"[{_key(k)}]", *body(v)]
    for k, v in arrays.items():
        for t in v:
            lines += [f"[[{_key(k)}]]", *body(t)]
    return "\n".join(lines) + "\n"


#: engines of the generated run files (the quick ones)
RUN_FILE_ENGINES = ("rwmh", "fixed_hmc", "sgld", "nuts", "svi", "chees")
#: the keyword types of the run files' data set
COSINE = {"n_train": "int", "n_test": "int", "noise": "float"}


@st.composite
def run_file_cases(draw) -> Case:
    """A run file as a dict (:func:`toml_text` writes it): ``[model]`` for the ``cosine`` data,
    ``[data]``, one or two ``[[engines]]`` and ``[run]``; valid, or with one fault in one table
    (a value of :data:`TOML_POOL`, a misspelled key or name, a table of the wrong type or
    missing) or in the set of tables."""
    pool = TOML_POOL
    where = draw(st.sampled_from(["none", "model", "data", "engines", "run", "tables"]))
    model = draw(spec_cases(pool, task="regression", input_dim=1)) if where == "model" else \
        Case(draw(spec_tables(task="regression", input_dim=1)))
    data = {"name": "cosine", "n_train": draw(st.integers(3, 8)), "n_test": 3}
    engines = [{"kind": k, **SHORT.get(k, {})}
               for k in draw(st.lists(st.sampled_from(RUN_FILE_ENGINES), min_size=1, max_size=2))]
    run = {"num_samples": 2, "warmup_steps": 1, "num_chains": 2, "seed": draw(st.integers(0, 3))}
    doc = {"model": model.value, "data": data, "engines": engines, "run": run}
    case = Case(doc, model.fields, model.must_refuse)
    how = draw(st.sampled_from(["value", "typo", "scalar", "missing"]))
    if where == "data":
        if how == "value":
            key = draw(st.sampled_from(sorted(COSINE)))
            fault = draw(perturbed(COSINE[key], key, pool))
            return Case({**doc, "data": {**data, key: fault.value}}, fault.fields, fault.must_refuse)
        if how == "typo":
            key = draw(st.sampled_from(sorted(data)))
            wrong = draw(misspelled(data[key] if key == "name" else key, list(COSINE) + ["name", "cosine"]))
            table = {**data, "name": wrong} if key == "name" else \
                {(wrong if k == key else k): v for k, v in data.items()}
            return Case({**doc, "data": table}, (wrong,), True)
        if how == "scalar":
            value = draw(st.sampled_from(pool).filter(lambda v: not isinstance(v, dict)))
            return Case({**doc, "data": value}, ("data", "dataset"), True)
        return Case({k: v for k, v in doc.items() if k != "data"}, ("data",), True)
    if where == "engines":
        i = draw(st.integers(0, len(engines) - 1))
        kind = engines[i]["kind"]
        if how == "value":
            if draw(st.booleans()):
                key = draw(st.sampled_from(["num_samples", "warmup_steps", "num_chains", "seed"]))
                fault = draw(count_case(key, pool + (1,)))
                table = {**engines[i], key: fault.value}
            else:
                fault = draw(engine_options(kind, pool))
                table = {"kind": kind, **fault.value}
            return Case({**doc, "engines": engines[:i] + [table] + engines[i + 1:]}, fault.fields, fault.must_refuse)
        if how == "typo":
            wrong = draw(misspelled(kind, ENGINES))
            table = {**engines[i], "kind": wrong}
            return Case({**doc, "engines": engines[:i] + [table] + engines[i + 1:]}, (wrong,), True)
        if how == "scalar":
            value = draw(st.sampled_from(pool + ([],)).filter(lambda v: not isinstance(v, dict)))
            return Case({**doc, "engines": value}, ("engines", "kind"), True)
        table = {k: v for k, v in engines[i].items() if k != "kind"}
        return Case({**doc, "engines": engines[:i] + [table] + engines[i + 1:]}, ("kind",), True)
    if where == "run":
        if how == "value":
            key = draw(st.sampled_from(sorted(run)))
            fault = draw(count_case(key, pool + (1,)))
            return Case({**doc, "run": {**run, key: fault.value}}, fault.fields, fault.must_refuse)
        if how == "typo":
            key = draw(st.sampled_from(sorted(run)))
            wrong = draw(misspelled(key, RUN_COUNTS))
            return Case({**doc, "run": {(wrong if k == key else k): v for k, v in run.items()}}, (wrong,), True)
        value = draw(st.sampled_from(pool).filter(lambda v: not isinstance(v, dict)))
        return Case({**doc, "run": value}, ("run",), True)
    if where == "tables":
        if how in ("typo", "value"):
            key = draw(st.sampled_from(sorted(doc)))
            wrong = draw(misspelled(key, doc))
            return Case({(wrong if k == key else k): v for k, v in doc.items()}, (wrong,), True)
        return Case({k: v for k, v in doc.items() if k != "model"}, ("model",), True)
    return case


# ------------------------------------------------------------------ data arrays
X_FAULTS = ("columns", "flat", "3d", "empty", "nan", "inf", "complex", "text", "object", "bool", "int", "float16")
Y_FAULTS = ("length", "two_columns", "column", "nan", "inf", "text", "int", "label_high", "label_low",
            "label_fraction", "label_float", "label_bool")


def _fault_x(x: np.ndarray, y: np.ndarray, how: str, rng: np.random.Generator) -> tuple[Any, Any, Case]:
    """``x`` broken by ``how`` (some ways are valid), with ``y`` and the fault."""
    n, d = x.shape
    refuse = Case(None, ("x",), True)
    if how == "columns":
        return np.hstack([x, x[:, :1]]), y, refuse
    if how == "flat":
        return x[:, 0], y, Case(None) if d == 1 else refuse
    if how == "3d":
        return x[..., None], y, refuse
    if how == "empty":
        return x[:0], y[:0], refuse
    if how in ("nan", "inf"):
        x = x.copy()
        x[rng.integers(n), rng.integers(d)] = np.nan if how == "nan" else -np.inf
        return x, y, refuse
    if how == "complex":
        return x + 1j, y, refuse
    if how == "text":
        return x.astype(str), y, refuse
    if how == "object":
        x = x.astype(object)
        x[0, 0] = None
        return x, y, refuse
    return {"bool": x > 0, "int": np.round(x).astype(np.int64), "float16": x.astype(np.float16)}[how], y, Case(None)


def _fault_y(x: np.ndarray, y: np.ndarray, how: str, classes: int | None,
             rng: np.random.Generator) -> tuple[Any, Any, Case]:
    """``y`` broken by ``how`` (label faults only for classification; some ways are valid)."""
    n = len(y)
    refuse = Case(None, ("y", "labels") if classes else ("y",), True)
    row = rng.integers(n)
    if how == "length":
        return x, y[:-1], refuse
    if how == "two_columns":
        return x, np.stack([y, y], 1), refuse
    if how == "column":
        return x, y[:, None], Case(None)
    if how in ("nan", "inf"):
        y = y.astype(np.float64)
        y[row] = np.nan if how == "nan" else np.inf
        return x, y, refuse
    if how == "text":
        return x, y.astype(str), refuse
    if not classes:
        return x, np.round(y).astype(np.int64), Case(None)  # integer targets regress too
    y = y.copy()
    if how in ("label_high", "label_low", "label_fraction"):
        y = y.astype(np.float64) if how == "label_fraction" else y
        y[row] = {"label_high": classes, "label_low": -1, "label_fraction": 0.5}[how]
        return x, y, refuse
    if how == "label_bool" and classes == 2:
        return x, y.astype(bool), Case(None)
    return x, y.astype(np.float64), Case(None)  # integral floats are labels


def _container(a: Any, kind: str) -> Any:
    """``a`` as a numpy array, a torch tensor (numeric arrays only) or nested lists."""
    if kind == "torch" and isinstance(a, np.ndarray) and a.dtype.kind in "biufc":
        return torch.as_tensor(a)
    return a.tolist() if kind == "list" and isinstance(a, np.ndarray) else a


@st.composite
def data_cases(draw) -> tuple[str, int, Case]:
    """``(likelihood, input_dim, case)``: ``(x, y)`` or ``(x, y, x_test, y_test)`` for a network
    with that likelihood and input width, valid or with one fault in one split's x or y, or a
    tuple of the wrong length; as numpy arrays, tensors or lists."""
    likelihood = draw(st.sampled_from(["gaussian", "bernoulli", "categorical"]))
    classes = {"gaussian": None, "bernoulli": 2, "categorical": 3}[likelihood]
    d, n = draw(st.integers(1, 3)), draw(st.integers(2, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    arrays = []
    for rows in (n, 3):
        x = rng.standard_normal((rows, d))
        arrays += [x, np.arange(rows) % classes if classes else rng.standard_normal(rows)]
    where = draw(st.sampled_from(["none", "x", "y", "tuple"]))
    split = draw(st.sampled_from([0, 2])) if draw(st.booleans()) else None  # None: (x, y) only
    i = split or 0
    fault = Case(None)
    if where == "x":
        arrays[i], arrays[i + 1], fault = _fault_x(arrays[i], arrays[i + 1], draw(st.sampled_from(X_FAULTS)), rng)
    elif where == "y":
        how = draw(st.sampled_from(Y_FAULTS))
        arrays[i], arrays[i + 1], fault = _fault_y(arrays[i], arrays[i + 1], how, classes, rng)
    kinds = draw(st.lists(st.sampled_from(["numpy", "torch", "list"]), min_size=4, max_size=4))
    data = tuple(_container(a, k) for a, k in zip(arrays, kinds))
    if where == "tuple":
        return likelihood, d, Case(data[:draw(st.sampled_from([1, 3]))], ("data",), True)
    data = data if split is not None else data[:2]
    return likelihood, d, Case(data, fault.fields, fault.must_refuse)
