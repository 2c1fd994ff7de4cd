"""What can be known wrong about a run before its directory is made or a model loads: each section's ranges
(``RunConfig.check``), optional packages, model and data files, user reward functions, and the rules across
sections (settings that are each valid but do not work together), each named in one line. Also which isolation
model-written code runs under, or that the run runs none.
"""

from __future__ import annotations

from pathlib import Path

from autotelic.algorithms import ADVANTAGE_ESTIMATORS, BATCH_BASELINED, AlgorithmSpec, get_algorithm
from autotelic.backends.embedded import RANDOM_PREFIX, ModelFileError
from autotelic.backends.hf import NAMED_MODELS, resolve_device
from autotelic.backends.model_dir import model_dir_problem, read_chat_template, sees_images
from autotelic.backends.vllm import require_vllm, vllm_problems
from autotelic.config import AlgorithmConfig, ConfigError, RunConfig, missing_package
from autotelic.curricula.evolve import OPERATIONS, unknown_operation
from autotelic.envs import make_game_factory
from autotelic.errors import TrainingError  # re-exported: TrainingError's home for most callers
from autotelic.modes import Mode, get_mode
from autotelic.modes.environments import run_env_factory
from autotelic.evaluation import DECODINGS
from autotelic.rewards import JUDGE_MODEL, JUDGES, is_custom, reward_names
from autotelic.rewards.custom import reward_problems
from autotelic.sandbox import check as check_sandbox
from autotelic.sandbox import configure as configure_sandbox
from autotelic.tasks import UnknownFamilyError, get_family
from autotelic.tasks.files import data_problems
from autotelic.tasks.harness import ShowsSomeTests, Tested, families_showing_some_tests
from autotelic.value_model import value_model_problem
from autotelic.win_rate import prompts_problems

# Rewards that compare against Task.answer (or hidden tests): meaningless on prompts an LLM wrote.
LABELLED_REWARDS = {"verifier", "math_verify", "unit_tests"}
# Environments that need an optional package: (package, pip extra).
ENV_PACKAGES = {"textarena": ("textarena", "games"), "web_browser": ("playwright", "web"),
                "web_screenshot": ("playwright", "web")}


# ---- building the stages from the config -------------------------------------------------------
def check_run(config: RunConfig) -> AlgorithmSpec:
    """Everything that can be known wrong before a run directory is made or a model loads, each named in one line:
    settings out of range (ConfigError), missing optional packages and model files (ConfigError), settings that
    do not work together (TrainingError)."""
    config.check()
    problems = package_problems(config) + model_problems(config) + own_problems(config)
    if problems:
        raise ConfigError("; ".join(problems))
    try:
        resolve_device(config.model.device)
    except ModelFileError as error:  # a GPU asked for where none is visible: a setting, not a model file
        raise ConfigError(str(error)) from None
    try:
        spec = get_algorithm(config.algorithm.name)
    except ValueError as error:
        raise TrainingError(str(error)) from None
    check_combination(config, spec)
    return spec


def package_problems(config: RunConfig) -> list[str]:
    """Optional packages the settings need and this machine lacks (vLLM's are ``require_vllm``'s)."""
    needs = []
    ray_setting = config.dist.ray_setting()
    if ray_setting is not None:
        needs.append((ray_setting, "ray", "dist"))
    if config.generate.env in ENV_PACKAGES:
        needs.append((f"generate.env={config.generate.env}", *ENV_PACKAGES[config.generate.env]))
    games = [family for family in config.curriculum.families if family.startswith("ta_")]
    if games:
        needs.append((f"curriculum.families entry {games[0]}", "textarena", "games"))
    logging_ = config.logging
    for flag, wanted in (("tensorboard", logging_.tensorboard), ("wandb", logging_.wandb), ("mlflow", logging_.mlflow)):
        if wanted:
            needs.append((f"logging.{flag}=true", flag, flag))
    return [problem for need in needs if (problem := missing_package(*need)) is not None]


def own_problems(config: RunConfig) -> list[str]:
    """The user's data files (read with ``curriculum.columns``), reward functions (imported) and win-rate
    instructions, checked here."""
    families = [*config.curriculum.families, *(config.eval.families or [])]
    wins = config.eval.win_rate
    return [*data_problems(families, config.curriculum.columns),
            *reward_problems([reward.name for reward in config.filter.rewards]),
            *(prompts_problems(wins.prompts) if wins.enabled and wins.prompts else [])]


def model_problems(config: RunConfig) -> list[str]:
    """Local model directories the run will load (and a chat template file), checked before any of them loads."""
    paths = {"model.path": config.model.path}
    evolve = config.curriculum.evolve
    if evolve.every and evolve.model not in NAMED_MODELS:
        paths["curriculum.evolve.model"] = evolve.model
    if config.value.enabled:
        paths["value.base_model"] = config.value.base_model
    for index, path in enumerate(config.discussion.models or []):
        paths[f"discussion.models[{index}]"] = path
    wins = config.eval.win_rate
    if wins.enabled:
        paths.update({f"eval.win_rate.{role}": name for role, name in (("reference", wins.reference),
                                                                       ("judge", wins.judge))
                      if name not in NAMED_MODELS})
    for index, reward in enumerate(config.filter.rewards):
        model = reward.options.get("model", JUDGE_MODEL)
        if reward.name in (*JUDGES, "reward_model") and model not in NAMED_MODELS:
            paths[f"filter.rewards[{index}].options.model"] = str(model)
    problems = [problem for key, path in paths.items() if path is not None and not path.startswith(RANDOM_PREFIX)
                if (problem := model_dir_problem(key, path)) is not None]
    problems += [f"filter.rewards[{index}].options.model={reward.options.get('model')}: {problem}"
                 for index, reward in enumerate(config.filter.rewards) if reward.name == "process_value"
                 if (problem := value_model_problem(Path(str(reward.options.get("model", ""))).expanduser()))]
    if config.model.chat_template is not None:
        try:
            read_chat_template(config.model.chat_template)
        except ModelFileError as error:
            problems.append(str(error))
    env = config.generate.env
    if (env == "web_screenshot" or config.generate.env_args.get("screenshot")) and not sees_images(config.model.path):
        model = f"model.path={config.model.path}" if config.model.path else "the embedded model"
        problems.append(f"generate.env={env} shows page screenshots, which {model} (text only) cannot read: set "
                        "model.path to a vision-language model (Idefics3/SmolVLM; random:smolvlm-tiny to try it) or "
                        "use generate.env=web_browser")
    return problems


def run_mode(config: RunConfig) -> Mode:
    """The run's generation mode; an unknown name stops in one line listing the valid ones (plug-ins' included)."""
    try:
        return get_mode(config.generate.mode)
    except ValueError as error:
        raise TrainingError(f"generate.mode: {error}") from None


def check_combination(config: RunConfig, spec: AlgorithmSpec) -> None:
    """Settings that are each valid but do not work together, named before the model loads: the rules across
    sections here, the generation mode's own (``Mode.problems``) from its module."""
    control, name, mode = config.control, config.generate.mode, run_mode(config)
    problems = []
    within_group = spec.advantage in ADVANTAGE_ESTIMATORS and spec.advantage not in BATCH_BASELINED
    if within_group or spec.name == "online_dpo":  # baselines or pairs within a group
        key = "control.min_group_size" if control.adaptive_group_size else "generate.group_size"
        smallest = control.min_group_size if control.adaptive_group_size else config.generate.group_size
        if smallest < 2 and not mode.branches:
            problems.append(f"{key}={smallest} makes groups of one sample, and {spec.name} learns from the "
                            f"differences within a task's group (every advantage would be 0): set {key}=2 or more")
    worst_group = config.generate.group_size * control.max_new_tokens  # what Budget plans a task at
    if control.max_tokens_per_step is not None and control.max_tokens_per_step < worst_group:
        problems.append(f"control.max_tokens_per_step={control.max_tokens_per_step} fits no task (generate.group_size "
                        f"x control.max_new_tokens = {worst_group} tokens at most): set it to {worst_group} or more")
    if control.max_samples_per_step is not None and control.max_samples_per_step < config.generate.group_size:
        problems.append(f"control.max_samples_per_step={control.max_samples_per_step} fits no task (one task is "
                        f"generate.group_size = {config.generate.group_size} samples): set it to "
                        f"{config.generate.group_size} or more")
    problems += async_problems(config)
    if config.dist.env_workers and not mode.holds_envs(config):
        problems.append(f"dist.env_workers holds the environments of generate.mode=episode (or "
                        f"propose.executor_tools); generate.mode={name} has none")
    if config.dist.reward_workers and rewards_on_the_policy(config):
        problems.append(f"reward '{rewards_on_the_policy(config)[0]}' runs the policy being trained, which reward "
                        "workers do not hold: give the judge its own model (options.model) or set "
                        "dist.reward_workers=0")
    problems += vllm_problems(config.vllm, config.model.lora, bool(config.dist.rollout_workers))
    if config.control.stop_repeats and config.vllm.enabled:
        problems.append("control.stop_repeats stops looping samples in the transformers decoder, which vLLM "
                        "rollouts do not use: set control.stop_repeats=0 or vllm.enabled=false")
    if config.control.stop_pattern and config.vllm.enabled:
        problems.append("control.stop_pattern stops complete answers in the transformers decoder, which vLLM "
                        "rollouts do not use: set control.stop_pattern='' or vllm.enabled=false")
    if config.control.stop_pattern and (name == "episode" or mode.games):
        problems.append(f"control.stop_pattern ends single replies; the turns of generate.mode={name} end by their "
                        "environment's protocol: set control.stop_pattern=''")
    if config.generate.env is not None and mode.games:  # an unknown name stops here, with the known ones listed
        make_game_factory(config.generate.env)
    elif config.generate.env is not None:
        run_env_factory(config)
    if config.algorithm.intra_tree and not (config.episode.tree_roots and spec.advantage in ADVANTAGE_ESTIMATORS):
        problems.append("algorithm.intra_tree adds Tree-GRPO's intra-tree term to the advantages of episode trees: "
                        "set episode.tree_roots > 0 with a policy-gradient algorithm, or algorithm.intra_tree=false")
    if config.episode.tree_roots and name != "episode":
        problems.append(f"episode.tree_roots branches the episodes of generate.mode=episode, not {name}: set "
                        "episode.tree_roots=0")
    if config.curriculum.prefixes.iteration_steps and config.filter.dynamic_sampling:
        problems.append("curriculum.prefixes.iteration_steps counts the rounds its curriculum observes, which "
                        "filter.dynamic_sampling makes several a step: set filter.dynamic_sampling=false (ReST-GRPO's "
                        "iterations train on what the filter kept) or curriculum.prefixes.iteration_steps=0")
    if config.selfplay.opponent != "self" and not mode.games:
        problems.append(f"selfplay.opponent={config.selfplay.opponent} needs generate.mode=selfplay, not {name}")
    labelled = [r.name for r in config.filter.rewards if r.name in LABELLED_REWARDS]
    if config.curriculum.name == "test_time" and labelled:
        problems.append(f"curriculum.name=test_time trains on the held-out prompts, so reward '{labelled[0]}' would "
                        "read their answers: use a label-free reward (majority_vote, self_certainty, judge)")
    evolve = config.curriculum.evolve
    if evolve.every:
        if config.curriculum.name != "regret":
            problems.append("curriculum.evolve.every > 0 evolves the prompt pool of curriculum.name=regret, "
                            f"not {config.curriculum.name}")
        if labelled:
            problems.append(f"evolved prompts have no reference answer, so reward '{labelled[0]}' cannot score "
                            "them: use a label-free reward (majority_vote, self_certainty, judge)")
        unknown = unknown_operation(evolve.operations)
        if unknown is not None:
            problems.append(f"unknown curriculum.evolve.operations entry '{unknown}'; valid: {', '.join(OPERATIONS)}")
    if spec.name == "offline_dpo" and config.algorithm.dataset is None:
        problems.append("algorithm.name=offline_dpo needs algorithm.dataset (a JSONL of prompt/chosen/rejected)")
    if any(r.name == "unit_tests" and not r.options.get("shown", True) for r in config.filter.rewards):
        problems += _untold_shown_tests(config.curriculum.families, config.curriculum.columns)
    known_rewards = [*reward_names(), "env"]
    problems += [f"unknown reward '{r.name}' in filter.rewards; valid: {', '.join(known_rewards)}"
                 for r in config.filter.rewards if r.name not in known_rewards and not is_custom(r.name)]
    problems += [f"unknown decoding '{d}' in value.decodings; valid: {', '.join(DECODINGS)}"
                 for d in config.value.decodings if d not in DECODINGS]
    if config.value.enabled and not config.train.export_model and config.value.base_model is None:
        problems.append("value.enabled fits its value model on the exported policy, and train.export_model=false "
                        "writes none: set train.export_model=true or value.base_model=<model directory>")
    hints = config.curriculum.hints
    if hints.fraction and hints.mode == "demonstration" and config.generate.mode not in ("sample", "episode"):
        problems.append(f"curriculum.hints.mode=demonstration puts the reference in a group as one of its samples or "
                        f"episodes, so it needs generate.mode=sample or episode, not {config.generate.mode}: use "
                        f"curriculum.hints.mode=prompt")
    problems += turn_credit_problems(config, spec, mode)
    problems += mode.problems(config, spec)
    if problems:
        raise TrainingError("; ".join(problems))
    if config.vllm.enabled:  # before the model loads: name a missing package or GPU
        require_vllm(config.vllm)


def _known_family(name: str, columns: dict[str, str]) -> object | None:
    """The family ``name`` names, a user's data read with the run's column names (its files were checked before
    this); None for an environment's own family, known only once its environment loads."""
    try:
        return get_family(name, columns)
    except UnknownFamilyError:
        return None


def _untold_shown_tests(families: list[str], columns: dict[str, str]) -> list[str]:
    """For unit_tests with shown: false: the first family that cannot say which tests its prompts show (an
    environment's own family does not)."""
    for name in families:
        if not isinstance(_known_family(name, columns), ShowsSomeTests):
            telling = families_showing_some_tests()
            return [f"unit_tests with shown: false grades only the tests a task's prompt does not show, and family "
                    f"'{name}' does not say which those are ({', '.join(telling)} does): drop shown: false or "
                    f"train on {telling[0]}"]
    return []


def turn_credit_problems(config: RunConfig, spec: AlgorithmSpec, mode: Mode) -> list[str]:
    """algorithm.turn_credit needs episodes, an advantage it generalises and rewards scored in this process."""
    algo, defaults = config.algorithm, AlgorithmConfig()
    problems = [] if algo.turn_baseline == "state" else [
        f"algorithm.{key} applies only to GiGPO's step groups, which are off: set algorithm.turn_baseline=state "
        "(with algorithm.turn_credit=true)"
        for key in ("step_weight", "step_discount") if getattr(algo, key) != getattr(defaults, key)]
    if not algo.turn_credit:
        return problems + ([] if algo.turn_baseline == "group" else [
            f"algorithm.turn_baseline={algo.turn_baseline} sets what turn credit compares each turn with, and turn "
            "credit is off: set algorithm.turn_credit=true"])
    if not mode.holds_envs(config):
        problems.append(f"algorithm.turn_credit credits the turns of multi-turn episodes: generate.mode="
                        f"{config.generate.mode} steps no environment (use generate.mode=episode)")
    if spec.advantage not in ("grpo", "dr_grpo"):
        problems.append(f"algorithm.turn_credit normalises turn returns within groups as GRPO does: use grpo, "
                        f"dr_grpo, dapo or gspo, not {spec.name}")
    if config.dist.reward_workers:
        problems.append("algorithm.turn_credit reads each turn's rewards, which reward workers do not send back: "
                        "set dist.reward_workers=0")
    return problems


def runs_model_code(config: RunConfig) -> bool:
    """Whether the run executes model-written code: code task families (scored by their tests), the unit_tests
    reward, the python tool, code proposals, or data rows with tests."""
    return (any(_runs_code(name, config.curriculum.columns) for name in config.curriculum.families)
            or any(r.name == "unit_tests" for r in config.filter.rewards) or config.generate.env == "python"
            or run_mode(config).runs_code(config))


def _runs_code(family_name: str, columns: dict[str, str]) -> bool:
    """Whether scoring the family's tasks runs model-written code (for an environment's own family, generate.env and
    the mode say)."""
    family = _known_family(family_name, columns)
    return isinstance(family, Tested) and family.runs_code


def sandbox_isolation(config: RunConfig) -> str | None:
    """Sets ``sandbox.isolation`` for every sandbox of this process and returns the isolation model-written code
    runs under (None: the run runs none). Called before any model loads: without isolation a run stops here."""
    configure_sandbox(config.sandbox.isolation)
    return check_sandbox() if runs_model_code(config) else None


def rewards_on_the_policy(config: RunConfig) -> list[str]:
    """Rewards computed by the model being trained (its confidence, or the policy as its own judge)."""
    return [r.name for r in config.filter.rewards if r.name == "self_certainty"
            or r.name in JUDGES and r.options.get("model", JUDGE_MODEL) == "policy"]


def async_problems(config: RunConfig) -> list[str]:
    """Asynchronous rollouts run beside the update, so nothing they do may use the model being trained."""
    if not config.dist.async_steps:
        return []
    problems = []
    if not config.dist.rollout_workers:
        problems.append("dist.async_steps needs dist.rollout_workers >= 1: rollouts collected during an update "
                        "must come from workers holding their own copy of the weights")
    on_policy = rewards_on_the_policy(config)
    if on_policy:
        problems.append(f"reward '{on_policy[0]}' runs the policy being trained, which changes under asynchronous "
                        "rollouts: give the judge its own model (options.model) or set dist.async_steps=0")
    if config.curriculum.evolve.every and config.curriculum.evolve.model == "policy":
        problems.append("curriculum.evolve.model=policy rewrites prompts with the model being trained: give the "
                        "evolver its own model or set dist.async_steps=0")
    return problems
