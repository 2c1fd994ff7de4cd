"""Curricula: the creator that decides which tasks to generate next (the Replay stage's other half).

``BanditCurriculum`` draws (family, level) arms by an estimated learning value;
``PromptPoolCurriculum`` draws concrete prompts from a growing pool by how informative they were;
``PrefixCurriculum`` adds ReST-GRPO's partial-solution prompts to either.
"""

from __future__ import annotations

from autotelic.curricula.bandit import BanditCurriculum, EmptyFamilyError
from autotelic.curricula.base import Curriculum
from autotelic.curricula.prefixes import PrefixCurriculum
from autotelic.curricula.regret import EmptyPoolError, PromptPoolCurriculum

__all__ = ["BanditCurriculum", "Curriculum", "EmptyFamilyError", "EmptyPoolError", "PrefixCurriculum",
           "PromptPoolCurriculum"]
