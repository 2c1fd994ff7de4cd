"""Typed run configuration: dataclasses, loadable from YAML, with dotted ``key=value`` overrides.

Every field has a default, so ``RunConfig()`` is the default recipe. Unknown keys and values of
the wrong type stop with a one-line message that names the key and the valid choices.

``rules`` holds the range checks, ``sections``, ``evaluation``, ``modes`` and ``runtime`` the sections (each
checks itself in ``problems``), ``run`` the whole ``RunConfig``, ``loading`` YAML and overrides, ``docs`` each
key's one-line documentation (``autotelic config``). ``autotelic.loading.load_config`` adds the defaults of the
environment a recipe names, above envs.
"""

from autotelic.config.evaluation import EvalConfig, SearchConfig, ValueConfig
from autotelic.config.loading import missing_package, save_config, section_overrides, to_dict
from autotelic.config.modes import DiscussionConfig, OperatorConfig, ProposeConfig, ProposeKind
from autotelic.config.rules import ConfigError
from autotelic.config.run import RunConfig
from autotelic.config.runtime import DistConfig, LoggingConfig, SandboxConfig, VLLMConfig
from autotelic.config.sections import (
    DATA_COLUMNS,
    AlgorithmConfig,
    ControlConfig,
    CurriculumConfig,
    EvolveConfig,
    FilterConfig,
    GenerateConfig,
    ModelConfig,
    ReplayConfig,
    RewardSpec,
    TrainConfig,
)

__all__ = [
    "DATA_COLUMNS", "AlgorithmConfig", "ConfigError", "ControlConfig", "CurriculumConfig", "DiscussionConfig",
    "DistConfig", "EvalConfig", "EvolveConfig", "FilterConfig", "GenerateConfig", "LoggingConfig", "ModelConfig",
    "OperatorConfig", "ProposeConfig", "ProposeKind", "ReplayConfig", "RewardSpec", "RunConfig", "SandboxConfig",
    "SearchConfig", "TrainConfig", "VLLMConfig", "ValueConfig", "missing_package", "save_config", "section_overrides",
    "to_dict",
]
