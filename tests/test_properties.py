"""Property-based tests: every generated input (engine names and run-level counts, engine
options, model specs, run files, data arrays), valid or broken, is either accepted and runs
a few draws, or refused with a ``ValueError`` / ``SpecError`` naming the broken field;
never anything else. The generators and the checks are in ``tests/support/properties.py``.

Fixed seeds (``derandomize``), no example database, bounded examples, tiny runs.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bnnzoo.cli import load_data, read_run_file
from bnnzoo.experiments import compare
from bnnzoo.inference import ENGINES, run
from bnnzoo.models import Bernoulli, BNNSpec, Categorical, Dense, GaussianLikelihood, spec_from
from tests.support.properties import (
    ENGINE_PRIOR, RUN_COUNTS, SHORT, Case, assert_draws, count_case, data_cases, engine_options, refused,
    run_file_cases, spec_cases, tiny_data, toml_text,
)


def examples(n: int):
    """Hypothesis settings of this suite: ``n`` examples, fixed seed, no database, no deadline."""
    return settings(max_examples=n, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def engine_spec(engine: str) -> BNNSpec:
    """A 2-3-1 tanh network with the prior ``engine`` needs."""
    return BNNSpec.from_dict({"layers": [{"units": 3, "activation": "tanh"}, {"units": 1}], "input_dim": 2,
                              "prior": ENGINE_PRIOR.get(engine, "gaussian"),
                              "likelihood": {"kind": "gaussian", "noise": 0.5}})


NOT_ENGINES = ("nut", "NUTS", "", "rwmh ", 3, None, ["nuts"], ("rwmh",))


@examples(150)
@given(engine=st.sampled_from(sorted(ENGINES) + list(NOT_ENGINES)),
       counts=st.fixed_dictionaries({k: count_case(k) for k in RUN_COUNTS}))
def test_run_checks_the_engine_name_and_the_counts(engine, counts):
    """Engine names, known or not, and run-level counts: valid, zero, negative, floats, strings, bools."""
    known = isinstance(engine, str) and engine in ENGINES
    case = Case(engine) if known else Case(engine, ("engine",), True)
    for count in counts.values():
        case = case.also(count)
    values = {k: c.value for k, c in counts.items()}
    spec = engine_spec(engine if known else "rwmh")
    done, result = refused(lambda: run(spec, tiny_data(spec), engine=engine, **values,
                                       **SHORT.get(engine if known else "", {})), case)
    if not done:
        assert_draws(result, values["num_chains"], values["num_samples"])


@examples(400)
@given(st.sampled_from(sorted(ENGINES)).flatmap(lambda e: st.tuples(st.just(e), engine_options(e))))
def test_run_checks_every_engine_option(engine_and_options):
    """Each engine's defaults given explicitly, then perturbed (wrong types, NaN, inf, 0, -1) or misspelled."""
    engine, case = engine_and_options
    spec = engine_spec(engine)
    done, result = refused(lambda: run(spec, tiny_data(spec), engine=engine, num_samples=2, warmup_steps=2,
                                       num_chains=2, **case.value), case)
    if not done:
        assert_draws(result, 2, 2)
        passed = {k: v for k, v in case.value.items() if v is not None}  # None: a default filled in
        assert {k: result.options[k] for k in passed} == passed  # the options used are recorded


@examples(400)
@given(spec_cases())
def test_model_specs_build_and_run_or_name_the_field(case):
    """Model tables: layers, activations, priors, overrides and likelihoods, valid or with one fault."""
    done, spec = refused(lambda: spec_from(case.value), case)
    if not done:
        assert BNNSpec.from_dict(spec.to_dict()) == spec
        result = run(spec, tiny_data(spec), engine="rwmh", num_samples=2, warmup_steps=1, num_chains=2)
        assert_draws(result, 2, 2)


@pytest.mark.filterwarnings("ignore:More chains:UserWarning")  # ArviZ, on two draws per chain
@examples(150)
@given(case=run_file_cases())
def test_run_files_run_or_name_the_field(case, tmp_path):
    """TOML run files: [model], [data], [[engines]] and [run], valid or with one fault; what
    :func:`read_run_file` accepts loads its data set and runs every engine."""
    path = tmp_path / "run.toml"
    path.write_text(toml_text(case.value))
    done, plan = refused(lambda: read_run_file(path), case, final=False)
    if done:
        return
    counts = {k: plan[k] for k in RUN_COUNTS if k in plan}
    # the loader checks the data set's values; the engines run only on data that fits the model
    done, result = refused(lambda: compare(plan["spec"], load_data(plan["data"], plan.get("seed", 0)),
                                           engines=plan["engines"], **counts), case)
    if not done:
        table, runs = result
        assert list(table["kind"]) == [engine["kind"] for engine in plan["engines"]]
        for engine, one in zip(plan["engines"], runs.values()):
            own = {**counts, **engine}  # an engine's own counts win
            assert_draws(one, own["num_chains"], own["num_samples"])


LIKELIHOOD = {"gaussian": lambda: GaussianLikelihood(0.5), "bernoulli": Bernoulli, "categorical": Categorical}


@examples(300)
@given(data_cases())
def test_data_arrays_run_or_name_the_field(likelihood_dim_case):
    """``(x, y)`` and ``(x, y, x_test, y_test)``: shapes, NaN/inf, dtypes, lengths, labels out of range."""
    likelihood, input_dim, case = likelihood_dim_case
    outputs = 3 if likelihood == "categorical" else 1
    spec = BNNSpec(layers=[Dense(2, "tanh"), Dense(outputs)], input_dim=input_dim,
                   likelihood=LIKELIHOOD[likelihood]())
    done, result = refused(lambda: run(spec, case.value, engine="rwmh", num_samples=2, warmup_steps=1,
                                       num_chains=2), case)
    if not done:
        assert_draws(result, 2, 2)
        x, y = result.data.x_train, result.data.y_train
        assert x.shape == (len(case.value[0]), input_dim) and x.dtype == torch.get_default_dtype()
        assert y.shape == (x.shape[0],) and y.dtype == (torch.int64 if spec.num_classes else x.dtype)
