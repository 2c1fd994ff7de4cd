"""Typed run configuration: dataclasses, loadable from YAML, with dotted ``key=value`` overrides.

Every field has a default, so ``RunConfig()`` is the default recipe. Unknown keys and values of
the wrong type stop with a one-line message that names the key and the valid choices.

``rules`` holds the range checks, ``sections``, ``curriculum``, ``evaluation``, ``modes`` and ``runtime`` the
sections (each checks itself in ``problems``), ``run`` the whole ``RunConfig``, ``loading`` YAML and overrides,
``docs`` each key's one-line documentation (``autotelic config``). ``autotelic.loading.load_config`` adds the
defaults of the environment a recipe names, above envs.
"""

from autotelic.config.evaluation import EvalConfig, SearchConfig, ValueConfig
from autotelic.config.loading import missing_package, save_config, section_overrides, to_dict
from autotelic.config.modes import (
    DiscussionConfig,
    EpisodeConfig,
    OperatorConfig,
    PartialConfig,
    ProposeConfig,
    ProposeKind,
    SelfplayConfig,
    TreeConfig,
)
from autotelic.config.curriculum import DATA_COLUMNS, CurriculumConfig, EvolveConfig, HintConfig, PrefixConfig
from autotelic.config.rules import ConfigError
from autotelic.config.run import RunConfig
from autotelic.config.runtime import DistConfig, GuardrailsConfig, LoggingConfig, SandboxConfig, VLLMConfig
from autotelic.config.sections import (
    AlgorithmConfig,
    ControlConfig,
    FilterConfig,
    GenerateConfig,
    ModelConfig,
    ReplayConfig,
    RewardSpec,
    TrainConfig,
)

__all__ = [
    "DATA_COLUMNS", "AlgorithmConfig", "ConfigError", "ControlConfig", "CurriculumConfig", "DiscussionConfig",
    "DistConfig", "EpisodeConfig", "EvalConfig", "EvolveConfig", "FilterConfig", "GenerateConfig", "GuardrailsConfig",
    "HintConfig", "LoggingConfig", "ModelConfig", "OperatorConfig", "PartialConfig", "PrefixConfig", "ProposeConfig",
    "ProposeKind", "ReplayConfig", "RewardSpec", "RunConfig", "SandboxConfig", "SearchConfig", "SelfplayConfig",
    "TrainConfig", "TreeConfig", "VLLMConfig", "ValueConfig", "missing_package", "save_config", "section_overrides",
    "to_dict",
]
