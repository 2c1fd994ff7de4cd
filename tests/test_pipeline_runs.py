"""Every algorithm and rollout-stage option in a real 2-step run on the embedded model.

Each run must finish, write its per-stage metrics, and show the option's own effect in the numbers
it logs (rounds of dynamic sampling, masked tree prefixes, replayed groups, preference pairs...).
"""

import importlib.util
import inspect
import json
from pathlib import Path

import pytest
import torch
from rows import verified

from autotelic.config import ConfigError
from autotelic.loading import load_config
from autotelic.checks import TrainingError
from autotelic.run_state import new_run_dir
from autotelic.trainer import Trainer
from autotelic.win_rate import OPEN_PROMPTS

pytestmark = pytest.mark.slow

RECIPE_DIR = Path(__file__).parent.parent / "recipes"
SMALL = [
    "train.steps=2", "control.tasks_per_step=3", "generate.group_size=4", "control.max_new_tokens=8",
    "curriculum.families=[compare, add]", "curriculum.levels=[1, 2]", "eval.levels=[1]", "eval.per_level=1",
    "eval.max_new_tokens=8", "eval.every=0", "algorithm.lr=1e-3", "model.lora=true", "model.lora_rank=8",
    "logging.progress=false", "train.max_minutes=null", "train.checkpoint_every=2",
    "train.export_model=false", "logging.report=false",  # read by the recipe runs below (as shipped) and by eva's
]


def _instructions(tmp_path: Path) -> Path:
    """4 of the shipped open instructions, for a run measuring its win rate: 32 pairs to judge took a minute."""
    instructions = tmp_path / "instructions.jsonl"
    instructions.write_text("".join(json.dumps({"prompt": prompt}) + "\n" for prompt in OPEN_PROMPTS[:4]))
    return instructions


def _run(tmp_path: Path, name: str, options: list[str], steps: int = 2, recipe: str | None = None,
         ) -> tuple[dict, list[dict], list[dict]]:
    """A short run of SMALL plus ``options``, on top of ``recipes/<recipe>.yaml`` if given."""
    recipe_file = RECIPE_DIR / f"{recipe}.yaml" if recipe else None
    config = load_config(recipe_file, SMALL + options + [f"logging.runs_dir={tmp_path}", f"logging.run_name={name}"])
    run_dir = new_run_dir(config)
    summary = Trainer(config, run_dir).run()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rollouts_file = run_dir / "rollouts.jsonl"  # offline DPO generates nothing
    rollouts = [json.loads(line) for line in rollouts_file.read_text().splitlines()] if rollouts_file.exists() else []
    assert summary["steps"] == steps
    step_rows = [r for r in rows if "reward/mean" in r]
    assert len(step_rows) == steps
    for row in step_rows:
        if "offline_dpo" not in options[0]:
            assert {"time/generate", "time/filter", "time/control", "time/replay", "time/update",
                    "generate/samples", "control/completion_tokens", "filter/kept_groups"} <= set(row)
    peaks = [row["perf/peak_rss_mib"] for row in step_rows]  # a peak so far: it never falls, and holds the model
    assert peaks == sorted(peaks) and peaks[0] > 300
    return summary, step_rows, rollouts


def test_dapo_with_dynamic_sampling_sec_curriculum_overlong_shaping_and_adaptive_sizes(tmp_path):
    _, steps, rollouts = _run(tmp_path, "dapo", [
        "algorithm.name=dapo", "filter.dynamic_sampling=true", "filter.max_rounds=3", "curriculum.name=sec",
        "control.overlong=shaping", "control.overlong_buffer=4", "control.adaptive_group_size=true"], recipe="dapo")
    assert any(r["filter/rounds"] > 1 for r in steps) or all(r["filter/kept_groups"] >= 3 for r in steps)
    for row in steps:
        assert row["generate/tasks"] >= 3 and "control/overlong_penalty" in row
        assert any(key.startswith("curriculum/value/") for key in row)
        if row.get("filter/kept_groups"):  # one update per batch: the log-probs it computes are the sampled ones
            assert row["train/clip_fraction"] == 0.0 and row["train/ratio_mean"] == pytest.approx(1.0, abs=5e-3)
    # shaping: a sample cut at 8 tokens scores its verifier reward minus 1
    cut = [r for r in rollouts if not r["finished"]]
    assert cut and all(r["reward"] == pytest.approx(verified(r) - 1.0) for r in cut)


def test_gspo_on_tree_rollouts_trains_shared_prefixes_once(tmp_path):
    _, steps, rollouts = _run(tmp_path, "gspo-tree", [
        "algorithm.name=gspo", "generate.mode=tree", "tree.branches=2", "tree.branch_samples=2", "tree.depth=2",
        "generate.temperature=1.0", "filter.drop_zero_variance=false"], recipe="gspo-tree")
    branches = [r for r in rollouts if "parent" in r]
    assert branches and all(r["branch_at"] >= 1 for r in branches)
    assert any(r["branch_at"] > 1 and r["parent"] >= 4 for r in branches)  # two levels: branches of branches
    for row in steps:
        assert row["control/mean_group_size"] > 4  # roots plus branches
        assert row["train/trained_tokens"] < row["control/completion_tokens"]  # branch prefixes masked
        assert row["train/ratio_mean"] == pytest.approx(1.0, abs=5e-3)  # a branch's log-probs are its own tokens'


def test_rloo_partial_rollouts_with_replay_buffer_and_decoupled_correction(tmp_path):
    _, steps, _ = _run(tmp_path, "rloo-partial", [
        "algorithm.name=rloo", "generate.mode=partial", "partial.segment_tokens=4", "train.steps=3",
        "replay.name=buffer", "replay.replay_groups=2", "algorithm.off_policy=decoupled",
        "filter.drop_zero_variance=false", "control.max_new_tokens=8"], steps=3, recipe="partial-replay")
    # 8-token answers take two 4-token segments: step 1 only starts them, step 2 finishes them
    assert steps[0]["generate/pending_groups"] > 0
    assert steps[1]["generate/tasks"] > 0
    assert steps[2]["replay/replayed_groups"] >= 1 and steps[2]["replay/mean_staleness"] >= 1
    assert "train/is_weight_mean" in steps[2]


def test_reinforce_pp_baseline_on_multi_turn_episodes_with_the_environment_return(tmp_path):
    _, steps, rollouts = _run(tmp_path, "episodes", [
        "algorithm.name=reinforce_pp_baseline", "generate.mode=episode", "generate.env=guess_number",
        "curriculum.families=[guess_number]", "episode.max_turns=3", "control.max_new_tokens=40",
        "episode.turn_tokens=8",  # a turn cut there still acts: two turns fit, of 8 decoding steps each, not one of 40
        "eval.max_new_tokens=8", "filter.rewards=[{name: env}]", "filter.drop_zero_variance=false",
        "generate.temperature=1.0"], recipe="guess-number")
    assert all(r["turns"] >= 1 and len(r["observations"]) == r["turns"] for r in rollouts)
    assert any(r["turns"] > 1 for r in rollouts)
    for row in steps:
        assert 1 <= row["episode/turns"] <= 3


def test_episode_trees_train_on_groups_grown_from_their_roots_at_turn_boundaries(tmp_path):
    """episode.tree_roots=2: each group of 4 starts 2 games and copies them after the first guess (a copy of a game
    already won is that game again); rollouts.jsonl tells the copies apart, and a copy's first guess is its
    parent's (the same observation follows it). The update adds Tree-GRPO's intra-tree term."""
    _, steps, rollouts = _run(tmp_path, "episode-tree", [
        "generate.mode=episode", "generate.env=guess_number", "curriculum.families=[guess_number]",
        "episode.max_turns=3", "control.max_new_tokens=40", "episode.turn_tokens=8", "eval.max_new_tokens=8",
        "filter.rewards=[{name: env}]", "filter.drop_zero_variance=false", "generate.temperature=1.0",
        "episode.tree_roots=2", "episode.branch_turns=[1]", "algorithm.intra_tree=true"], recipe="guess-number")
    assert all(row["episode/copies"] == 0.5 for row in steps)
    for start in range(0, len(rollouts), 4):
        group = rollouts[start:start + 4]
        assert len({r["prompt"] for r in group}) == 1 and [bool(r.get("forked")) for r in group] == [0, 0, 1, 1]
        for copy in group[2:]:
            parent = group[copy["forked"]["from"]]
            assert copy["forked"]["after_turn"] == 1 and copy["observations"][0] == parent["observations"][0]
            assert copy["completion"] == parent["completion"] if parent["turns"] == 1 else copy["turns"] > 1


def test_spiral_self_play_trains_both_seats_with_role_baselines_that_resume(tmp_path):
    from autotelic.checkpoint import latest_checkpoint, load_checkpoint

    _, steps, rollouts = _run(tmp_path, "spiral", [
        "algorithm.name=spiral", "algorithm.rae_decay=0.5", "generate.mode=selfplay", "generate.env=textarena",
        "curriculum.families=[ta_kuhn_poker]", "curriculum.levels=[1]", "curriculum.name=uniform",
        "filter.rewards=[{name: env}]", "filter.drop_zero_variance=false", "control.tasks_per_step=2",
        "generate.group_size=2", "episode.max_turns=4", "control.max_new_tokens=32", "generate.temperature=1.0"], recipe="spiral")
    roles = ["ta_kuhn_poker/p0", "ta_kuhn_poker/p1"]
    for step in (1, 2):
        rows = [r for r in rollouts if r["step"] == step]
        assert [r["player"] for r in rows] == [0, 0, 1, 1] * 2  # per task: its seat-0 group, then its seat-1 group
        for task in range(2):  # game i of a task holds row i of both seats' groups: zero-sum
            seat0, seat1 = rows[4 * task:4 * task + 2], rows[4 * task + 2:4 * task + 4]
            assert [a["reward"] + b["reward"] for a, b in zip(seat0, seat1)] == [0.0, 0.0]
            assert all("Your card is" in r["prompt"] for r in seat0 + seat1)
    for row in steps:
        assert row["reward/mean"] == 0.0 and row["generate/tasks"] == 4 and row["filter/kept_groups"] == 4
        # each seat's games come in the same order with opposite rewards, so the baselines mirror
        assert row[f"train/role_baseline/{roles[0]}"] == pytest.approx(-row[f"train/role_baseline/{roles[1]}"])
    run_dir = tmp_path / "spiral"
    saved = load_checkpoint(latest_checkpoint(run_dir))["role_baselines"]["values"]
    assert saved == {role: steps[-1][f"train/role_baseline/{role}"] for role in roles}
    resumed = Trainer(load_config(run_dir / "config.yaml"), run_dir, resume=True)
    assert resumed.baselines is not None and resumed.baselines.values == saved


def test_eva_evolves_its_prompt_pool_with_the_real_model_logs_the_population_and_resumes(tmp_path):
    from autotelic.trainer import resume
    from autotelic.win_rate import read_prompts

    summary, steps, rollouts = _run(tmp_path, "eva", [
        "curriculum.name=regret", "curriculum.pool_size=8", "curriculum.evolve.every=1", "curriculum.evolve.variants=2",
        "curriculum.evolve.fraction=0.5", "curriculum.evolve.max_new_tokens=24", "algorithm.name=rloo",
        "filter.rewards=[{name: majority_vote}]", "filter.drop_zero_variance=false", "generate.temperature=1.0",
        "train.checkpoint_every=1", "eval.win_rate.max_new_tokens=8", "curriculum.evolve.train=true",
        f"eval.win_rate.prompts={_instructions(tmp_path)}", "logging.report=true"], recipe="eva")
    run_dir = tmp_path / "eva"
    events = [json.loads(line) for line in (run_dir / "population.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events] == [1, 2]
    drawn = {step: {r["prompt"] for r in rollouts if r["step"] == step} for step in (1, 2)}
    assert {seed["prompt"] for seed in events[0]["seeds"]} <= drawn[1]  # seeds are prompts the solver just tried
    children = [c["prompt"] for c in events[0]["children"]]
    assert children and not set(children) & drawn[1]  # the real model wrote new prompts
    assert all(c.endswith("Reply with only the number.") for c in children)  # the families' format, put back
    assert steps[0]["curriculum/generation"] == 1 and steps[0]["evolve/children"] == len(children)
    seeds = {seed["uid"]: seed["informativeness"] for seed in events[0]["seeds"]}
    for child in events[0]["children"]:  # the lineage: each child's parent, operation and generation
        assert child["generation"] == 1 and child["operation"] in ("harder", "specific", "topic")
        assert child["parent_informativeness"] == seeds[child["parent_uid"]]
    assert steps[0]["creator/validity"] == len(children) / (len(children) + steps[0]["evolve/rejected"])
    # the trained creator: its update comes at the 2nd evolution, on the rewrites of the 1st
    assert "creator/groups" not in steps[0] and "creator/groups" in steps[1]
    assert {d["uid"] for d in events[1]["drawn"]} <= {c["uid"] for c in events[0]["children"]}  # as they fared
    assert events[1]["drawn"] and all(d["generation"] == 1 for d in events[1]["drawn"])
    assert 0 <= steps[1]["guard/prompt_novelty"] <= 1  # the guardrails measured the evolved prompts drawn
    assert set(children) & drawn[2] and steps[1]["curriculum/evolved_share"] >= 0.5  # step 2 trains on them
    assert all(r["answer"] == "" for r in rollouts if r["prompt"] in children)
    assert "Prompt population" in (run_dir / "report.html").read_text()
    assert summary["win_rate"]["pairs"] == 4 and (run_dir / "eval_after_win_rate.jsonl").is_file()
    assert len(read_prompts(load_config(RECIPE_DIR / "eva.yaml").eval.win_rate.prompts)) == 32  # as shipped
    summary = resume(run_dir, ["train.steps=3", "eval.win_rate.enabled=false"])  # measured above
    events = [json.loads(line) for line in (run_dir / "population.jsonl").read_text().splitlines()]
    assert summary["steps"] == 3 and [e["step"] for e in events] == [1, 2, 3]
    assert events[2]["generation"] >= events[1]["generation"] >= 1


@pytest.mark.parametrize("loss", ["sigmoid", "simpo"])
def test_online_dpo_on_an_eva_prompt_pool(tmp_path, loss):
    _, steps, _ = _run(tmp_path, "online-dpo", [
        "algorithm.name=online_dpo", f"algorithm.dpo_loss={loss}", "curriculum.name=regret", "curriculum.pool_size=12",
        "curriculum.metric=regret", "generate.temperature=1.0", "filter.rewards=[{name: majority_vote}]"],
        recipe="online-dpo")
    for row in steps:
        assert row["curriculum/pool_size"] == 12
        assert row.get("train/pairs", 0) == row["filter/kept_groups"]  # a kept group has distinct rewards: one pair
    trained = [row for row in steps if row.get("train/pairs")]
    assert trained
    if loss == "simpo":  # mean token log-probs, no reference: the implicit rewards are beta x a mean log-prob < 0
        assert all(row["train/chosen_reward"] < 0 and row["train/rejected_reward"] < 0 for row in trained)
    else:  # against the reference, which the policy equals before its first update
        assert trained[0]["train/reward_margin"] == pytest.approx(0.0, abs=1e-4)


def test_offline_dpo_from_a_pairs_file_learns_the_preference(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"prompt": f"What is {a} + 1? Reply with only the number.", "chosen": str(a + 1), "rejected": str(a + 7)}
            for a in range(10)]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, steps, _ = _run(tmp_path, "offline-dpo", [
        "algorithm.name=offline_dpo", f"algorithm.dataset={pairs}", "control.tasks_per_step=5", "train.steps=2",
        "algorithm.dpo_beta=0.5"])
    assert [r["train/pairs"] for r in steps] == [5, 5]
    assert steps[0]["train/reward_margin"] == pytest.approx(0.0, abs=1e-4)  # policy == reference at first
    assert steps[1]["train/reward_margin"] > 0  # after one update, chosen answers gained on rejected ones


def test_dr_grpo_with_summed_rewards_and_rest_selection(tmp_path):
    _, steps, rollouts = _run(tmp_path, "dr-grpo", [
        "algorithm.name=dr_grpo", "filter.rewards=[{name: verifier}, {name: length, weight: 0.5, options: {max_chars: 2}}]",
        "filter.min_reward_std=0.05", "filter.keep_top_fraction=0.5", "filter.drop_zero_variance=false",
        "generate.temperature=1.0", "control.tasks_per_step=4"])
    for row in rollouts:
        excess = max(0, len(row["completion"]) - 2)
        expected = verified(row) + 0.5 * -min(1.0, excess / 2)
        assert row["reward"] == pytest.approx(expected)
    assert all(r["filter"] in ("kept", "low_std", "low_value") for r in rollouts)
    kept = {r["prompt"] for r in rollouts if r["kept"]}
    assert all(len(kept & {r["prompt"] for r in rollouts if r["step"] == s}) <= 2 for s in (1, 2))


def test_label_free_rewards_majority_vote_and_the_policy_as_judge(tmp_path):
    _, steps, rollouts = _run(tmp_path, "judge", [
        "filter.rewards=[{name: majority_vote, weight: 0.5}, {name: judge, weight: 0.5, options: {model: policy}}]",
        "filter.drop_zero_variance=false", "generate.temperature=1.0"])
    for row in rollouts:
        if row["filter"] == "unscorable":  # the 135M judge did not write a grade for some sample
            continue
        assert row["reward"] is not None and -1e-9 <= row["reward"] <= 1.0 + 1e-9
        judge_part = row["reward"] - 0.5 * _majority(rollouts, row)
        assert 0.0 - 1e-6 <= judge_part <= 0.5 + 1e-6
    assert sum(r["filter"] != "unscorable" for r in rollouts) > 0


def _majority(rollouts: list[dict], row: dict) -> float:
    """1 when the row's answer is its group's majority answer (the vote's own extractor and tie rule)."""
    from autotelic.rewards.majority import default_extract, majority_answer

    group = [r["completion"] for r in rollouts if r["step"] == row["step"] and r["prompt"] == row["prompt"]]
    winner, _ = majority_answer([default_extract(c) for c in group])
    return float(winner is not None and default_extract(row["completion"]) == winner)


def test_bad_combinations_are_named_before_the_model_loads(tmp_path):
    for options, message in [
        (["generate.mode=tree", "algorithm.name=rloo"], "generate.mode=tree"),
        (["generate.mode=episode"], "needs generate.env"),
        (["algorithm.name=offline_dpo"], "needs algorithm.dataset"),
        (["algorithm.name=ppo"], "unknown algorithm.name 'ppo'"),
        (["generate.mode=partial", "control.early_exit_probe=2"], "early_exit_probe"),
        (["generate.mode=selfplay"], "generate.mode=selfplay needs generate.env"),
        (["generate.mode=selfplay", "generate.env=textarena", "control.early_exit_probe=2"], "early_exit_probe"),
        (["algorithm.name=spiral", "algorithm.rae_decay=1.5"], "rae_decay must lie in"),
    ]:
        with pytest.raises((ConfigError, TrainingError), match=message):  # a range on load, a combination after
            Trainer(load_config(None, SMALL + options + [f"logging.runs_dir={tmp_path}"]), tmp_path / "x")


# Recipes that a test of their own runs end to end from the recipe file, with more checks than one step
RUN_ELSEWHERE = {
    "dapo": "test_dapo_with_dynamic_sampling_sec_curriculum_overlong_shaping_and_adaptive_sizes",
    "gspo-tree": "test_gspo_on_tree_rollouts_trains_shared_prefixes_once",
    "partial-replay": "test_rloo_partial_rollouts_with_replay_buffer_and_decoupled_correction",
    "online-dpo": "test_online_dpo_on_an_eva_prompt_pool",
    "rest-rl-code": "test_vm_mcts.py::test_rest_rl_recipe_trains_the_value_model_and_eval_decodes_with_it",
    "comas": "test_comas.py::test_three_agents_on_two_base_models_discuss_train_on_their_own_turns_and_resume",
    "agent0": "test_propose.py::test_agent0_runs_on_the_real_model_and_resumes_in_phase",
    "agent0-code": "test_propose.py::test_agent0_code_runs_on_the_real_model_with_executed_labels",
    "spiral": "test_spiral_self_play_trains_both_seats_with_role_baselines_that_resume",
    "guess-number": "test_reinforce_pp_baseline_on_multi_turn_episodes_with_the_environment_return",
    "eva": "test_eva_evolves_its_prompt_pool_with_the_real_model_logs_the_population_and_resumes",
    "opagent-web": "test_web_agent.py::test_the_web_recipe_demonstrates_the_questions_no_episode_answered",
}
RECIPES = sorted(r for r in RECIPE_DIR.glob("*.yaml") if r.stem not in RUN_ELSEWHERE)


def test_each_recipe_run_elsewhere_names_a_test_that_loads_it():
    for stem, where in RUN_ELSEWHERE.items():
        module, _, name = where.rpartition("::")
        test = getattr(importlib.import_module(module.removesuffix(".py")), name) if module else globals()[name]
        body = inspect.getsource(test)
        loads = f"{stem}.yaml" in body or f'recipe="{stem}"' in body  # the file, or this module's _run(recipe=)
        assert (RECIPE_DIR / f"{stem}.yaml").is_file() and loads, stem


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_every_recipe_runs_a_step(recipe, tmp_path):
    """Each shipped recipe, shrunk to one small step, runs end to end as written."""
    shrink = ["train.steps=1", "control.tasks_per_step=2", "generate.group_size=2", "eval.per_level=1",
              "eval.levels=[1]", "eval.every=0", "filter.max_rounds=1",
              "logging.progress=false", "train.max_minutes=null", f"logging.runs_dir={tmp_path}", "logging.run_name=r",
              "model.lora=true", "model.lora_rank=8",  # LoRA: small checkpoints (full FT writes 1.6 GB each)
              "value.tasks=2", "value.iterations=1", "value.epochs=2",  # recipes with a VM-MCTS stage: keep it small
              "eval.win_rate.max_new_tokens=8", f"eval.win_rate.prompts={_instructions(tmp_path)}"]
    config = load_config(recipe, shrink)
    if config.eval.pass_k:  # pass@k from 2 samples a task instead of the recipe's (16 web episodes took a minute)
        config.eval.pass_k, config.eval.pass_samples = [1, 2], 2
    if config.generate.mode not in ("episode", "selfplay"):  # long single replies (code, math) cost the most here
        config.control.max_new_tokens = min(config.control.max_new_tokens, 24)
        config.eval.max_new_tokens = min(config.eval.max_new_tokens, 24)
    if config.vllm.enabled and not torch.cuda.is_available():  # a GPU recipe: as written, a clear stop here...
        with pytest.raises(ConfigError, match="GPU"):
            Trainer(config, new_run_dir(config))
        if importlib.util.find_spec("vllm") is None:
            return
        # ...and on vLLM's CPU build, the same recipe with its GPU-only settings turned off
        config.model.device, config.vllm.sleep, config.vllm.enforce_eager = "cpu", False, True
        if config.model.path and config.model.path.startswith("random:"):  # a size for GPU throughput: its settings
            config.model.path = "random:qwen2-tiny"  # run here on the tiny shape (test_backend checks the size's body)
    summary = Trainer(config, new_run_dir(config)).run()
    assert summary["steps"] == 1 and (tmp_path / "r" / "report.html").is_file()
    assert not config.eval.win_rate.enabled or summary["win_rate"]["pairs"] == 4
