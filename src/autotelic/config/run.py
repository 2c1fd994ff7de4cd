"""The whole run's configuration: one section of each kind; ``RunConfig()`` is the default recipe."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from autotelic.config.curriculum import CurriculumConfig
from autotelic.config.evaluation import EvalConfig, ValueConfig
from autotelic.config.modes import (
    DiscussionConfig,
    EpisodeConfig,
    OperatorConfig,
    PartialConfig,
    ProposeConfig,
    SelfplayConfig,
    TreeConfig,
)
from autotelic.config.rules import ConfigError
from autotelic.config.runtime import DistConfig, GuardrailsConfig, LoggingConfig, SandboxConfig, VLLMConfig
from autotelic.config.sections import (
    AlgorithmConfig,
    ControlConfig,
    FilterConfig,
    GenerateConfig,
    ModelConfig,
    ReplayConfig,
    TrainConfig,
)


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    value: ValueConfig = field(default_factory=ValueConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    partial: PartialConfig = field(default_factory=PartialConfig)
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    selfplay: SelfplayConfig = field(default_factory=SelfplayConfig)
    propose: ProposeConfig = field(default_factory=ProposeConfig)
    discussion: DiscussionConfig = field(default_factory=DiscussionConfig)
    operator: OperatorConfig = field(default_factory=OperatorConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    guardrails: GuardrailsConfig = field(default_factory=GuardrailsConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    def problems(self) -> list[str]:
        """Every setting outside its valid range, one line each; settings that are each valid but do not work
        together are ``checks.check_combination``'s."""
        return [problem for section in dataclasses.fields(self)
                for problem in getattr(self, section.name).problems(section.name)]

    def check(self) -> None:
        problems = self.problems()
        if problems:
            raise ConfigError("; ".join(problems))
