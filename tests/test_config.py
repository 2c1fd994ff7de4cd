from pathlib import Path

import pytest

from autotelic.config import ConfigError, RunConfig, save_config, to_dict
from autotelic.loading import load_config

RECIPES = sorted((Path(__file__).parent.parent / "recipes").glob("*.yaml"))


def test_defaults_overrides_and_yaml(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("train:\n  steps: 7\ngenerate:\n  group_size: 6\n")
    config = load_config(path, ["train.steps=9", "algorithm.lr=1e-3", "curriculum.families=[add, compare]"])
    assert config.train.steps == 9  # the override wins over the file
    assert config.generate.group_size == 6
    assert config.algorithm.lr == pytest.approx(1e-3)
    assert config.curriculum.families == ["add", "compare"]
    assert config.control.max_new_tokens == RunConfig().control.max_new_tokens


@pytest.mark.parametrize("override, message", [
    ("train.stepz=3", "unknown config key 'train.stepz'; valid keys here: steps, seed"),
    ("nope=1", "unknown config key 'nope'; valid keys here: model, generate"),
    ("train.steps=abc", "config key 'train.steps' must be int, got 'abc'"),
    ("model.lora=3", "config key 'model.lora' must be bool"),
    ("train.steps", "must look like key=value"),
    ("train.steps.x=1", "config key 'train.steps' must be int"),
    ("train=3", "config section 'train' must be a mapping"),
])
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(ConfigError, match=None) as error:
        load_config(None, [override])
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(listed)


def test_save_load_round_trip(tmp_path):
    config = load_config(None, ["train.steps=5", "model.path=/some/model", "train.max_minutes=null"])
    save_config(config, tmp_path / "config.yaml")
    assert to_dict(load_config(tmp_path / "config.yaml")) == to_dict(config)


def test_default_recipe_is_the_default_config():
    assert to_dict(load_config(Path(__file__).parent.parent / "recipes" / "default.yaml")) == to_dict(RunConfig())


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_every_recipe_loads(recipe, tmp_path):
    config = load_config(recipe)
    assert recipe.stem == "default" or to_dict(config) != to_dict(RunConfig())  # the recipe's settings were read
    save_config(config, tmp_path / "config.yaml")  # as a run saves it for `autotelic resume`
    assert to_dict(load_config(tmp_path / "config.yaml")) == to_dict(config)
