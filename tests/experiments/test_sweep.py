"""sweep(): engines x option grids x seeds; every grid key checked against its engine first."""

import pandas as pd
import pytest

from bnnzoo.experiments import grid_cells, sweep
from bnnzoo.models import zoo

COUNTS = {"num_samples": 10, "warmup_steps": 10, "num_chains": 2}


def test_grid_cells_engine_major_then_grid_then_seeds():
    cells = grid_cells(["fixed_hmc", "rwmh"], {"fixed_hmc": {"step_size": [0.01, 0.02], "num_steps": [3, 5]},
                                               "rwmh": {"scale": 0.1}}, seeds=[0, 7], common=COUNTS)
    assert len(cells) == 2 * 2 * 2 + 2
    assert [c.label for c in cells[:3]] == ["fixed_hmc step_size=0.01 num_steps=3 seed=0",
                                            "fixed_hmc step_size=0.01 num_steps=3 seed=7",
                                            "fixed_hmc step_size=0.01 num_steps=5 seed=0"]
    assert cells[-1].label == "rwmh scale=0.1 seed=7"
    assert cells[-1].options == {**COUNTS, "scale": 0.1, "seed": 7}
    assert cells[2].coords == {"seed": 0, "step_size": 0.01, "num_steps": 5}
    assert [c.label for c in grid_cells(["nuts"])] == ["nuts seed=0"]  # no grid: the engine's defaults


@pytest.mark.parametrize("args, message", [
    ((["fixed_hmc"], {"fixed_hmc": {"step_sze": [0.1]}}),
     "grid.fixed_hmc.step_sze: not an option of engine 'fixed_hmc'; did you mean 'step_size'?"),
    ((["fixed_hmc"], {"fixed_hmc": {"step_size": [0.1, -0.1]}}),
     "grid.fixed_hmc (step_size = -0.1): engine 'fixed_hmc': step_size must be a positive number, got -0.1"),
    ((["fixed_hmc"], {"fixed_hmc": {"num_steps": []}}), "grid.fixed_hmc.num_steps: an empty list"),
    ((["fixed_hmc"], {"fixed_hmc": {"seed": [1, 2]}}), "grid.fixed_hmc.seed: give the seeds of every cell in seeds"),
    ((["rwmh"], {"nuts": {"max_tree_depth": 4}}), "grid.nuts: 'nuts' is not one of the engines (rwmh)"),
    ((["rwmh", "rwhm"],), "engines[1]: unknown engine 'rwhm'; did you mean 'rwmh'?"),
    ((["rwmh", "rwmh"],), "engines[1]: 'rwmh' is listed twice"),
    (("rwmh",), "engines: give a non-empty list of engine names, got 'rwmh'"),
    ((["rwmh"], None, [0, -1]), "seeds[1] must be an integer >= 0, got -1"),
    ((["rwmh"], None, [3, 3]), "seeds[1]: seed 3 is listed twice"),
    ((["rwmh"], {"rwmh": {"num_chains": [0]}}), "grid.rwmh (num_chains = 0): num_chains must be an integer >= 1"),
])
def test_bad_grids_are_named_before_any_cell_runs(args, message):
    with pytest.raises(ValueError) as err:
        grid_cells(*args)
    assert message in str(err.value)


def test_sweep_writes_a_table_with_the_grid_columns_and_skips_finished_cells(cosine, tmp_path):
    grid = {"fixed_hmc": {"step_size": [0.01, 0.02], "num_steps": 3}}
    table = sweep(zoo.cosine_mlp(hidden=3), cosine, ["fixed_hmc", "rwmh"], grid, seeds=[0, 1], out=tmp_path,
                  progress=False, **COUNTS)
    assert list(table.columns[:5]) == ["engine", "kind", "seed", "step_size", "num_steps"]
    assert list(table.kind) == ["fixed_hmc"] * 4 + ["rwmh"] * 2 and list(table.seed) == [0, 1] * 3
    assert table.loc["fixed_hmc step_size=0.02 num_steps=3 seed=1", "step_size"] == 0.02
    assert table.loc["rwmh seed=0", "step_size"] != table.loc["rwmh seed=0", "step_size"]  # NaN: not its option
    written = pd.read_csv(tmp_path / "sweep.csv")
    assert list(written.engine) == list(table.engine) and list(written.columns) == list(table.columns)
    assert len(list(tmp_path.glob("*.nc"))) == 6
    again = sweep(zoo.cosine_mlp(hidden=3), cosine, ["fixed_hmc", "rwmh"], grid, seeds=[0, 1], out=tmp_path,
                  progress=False, **COUNTS)
    pd.testing.assert_frame_equal(again, table)  # every row read back from the cells' records
