"""VM-MCTS on the real embedded model: line-wise expansion, test-scored rollouts in the real sandbox,
the value model's training and persistence, the decoding strategies' budgets, a ReST-RL run whose
value stage feeds `autotelic eval`."""

import json
import random

import pytest
import torch
from typer.testing import CliRunner

from autotelic.backends.hf import HFPolicy
from autotelic.cli import app
from autotelic.config import ModelConfig, SearchConfig
from autotelic.curricula import PrefixCurriculum
from autotelic.curricula.base import find_layer
from autotelic.evaluation import Decoding, correct, evaluate, reselect
from autotelic.rollout.filter import verifier_reward
from autotelic.loading import load_config
from autotelic.rewards import build_reward
from autotelic.search import (Node, RolloutEvaluator, SearchTree, ValueEvaluator, best_response, search,
                              value_examples)
from autotelic.tasks import get_family
from autotelic.run_state import new_run_dir
from autotelic.trainer import Trainer
from autotelic.types import Task
from autotelic.value_model import ValueExample, ValueModel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def policy():
    return HFPolicy(ModelConfig(), seed=0)


def _code_tasks(family: str) -> list[Task]:
    rng = random.Random(3)
    return [get_family(family).generate(rng, 1) for _ in range(2)]


@pytest.fixture(scope="module")
def tasks():
    return _code_tasks("humaneval")


def test_generation_stops_after_a_line_end(policy, tasks):
    line_end = set(policy.token_ids_containing("\n"))
    prompt = policy.encode_prompt(tasks[0].prompt, "```python\n")
    (completions,) = policy.generate([prompt], 4, 40, 1.0, stop_token_ids=sorted(line_end))
    for completion in completions:
        stopped_early = len(completion.token_ids) < 40 and not completion.finished
        inner = completion.token_ids[:-1]
        assert not line_end & set(inner)  # no line ends before the last token
        if stopped_early:
            assert completion.token_ids[-1] in line_end
    assert policy.token_ids_containing("\n") is policy.token_ids_containing("\n")  # cached


def test_search_with_test_scored_rollouts_labels_nodes_consistently(policy):
    tasks = _code_tasks("pyfunc")  # prompts a third of HumanEval's to prefill, and the model solves some: rewards vary
    # an endless loop ends at its CPU limit, which a loaded machine does not reach sooner (a wall limit near it
    # would fail a program once and pass it when recomputed below)
    reward = build_reward("unit_tests", {"cpu_seconds": 2.0, "wall_seconds": 60.0})
    evaluator = RolloutEvaluator(policy, reward, max_new_tokens=64, temperature=1.0)
    trees = search(policy, tasks, evaluator, iterations=3, children=2, step_tokens=16, max_new_tokens=64,
                   temperature=1.0, c_uct=1.0)
    for tree in trees:
        evaluated = [n for n in tree.nodes[1:] if n.estimate is not None]
        assert tree.nodes[0].visits == len(evaluated) == len(tree.nodes) - 1  # every new node evaluated once
        assert 1 <= tree.iterations <= 3 and tree.tokens_spent > 0
        for index, node in enumerate(tree.nodes[1:], start=1):
            assert node.token_ids[:len(tree.nodes[node.parent].token_ids)] == tree.nodes[node.parent].token_ids
            assert node.visits == 1 + sum(tree.nodes[c].visits for c in node.children)
            assert len(node.token_ids) <= 64
    # the rollouts were really run against the problems' tests: their (graded) rewards recompute exactly
    for example in evaluator.rollouts:
        task = next(t for t in tasks if t.prompt == example.prompt)
        assert [example.target] == reward(task, [example.response])
    examples = value_examples(trees, policy.decode)
    assert examples and all(0.0 <= e.target <= 1.0 and e.weight >= 1 for e in examples)


def test_search_widens_exhausted_nodes_until_the_budget_is_spent(policy):
    # pyfunc at the recipe's decoding temperature: every sample opens with the same code fence and signature, so
    # without widening the root was exhausted after an answer or two, a tenth of the budget spent
    tasks = _code_tasks("pyfunc")
    budget = 192
    trees = search(policy, tasks, ValueEvaluator(policy, ValueModel("random:qwen2-tiny")), iterations=budget,
                   children=2, step_tokens=16, max_new_tokens=48, temperature=0.5, c_uct=1.0, token_budget=budget)
    for tree in trees:
        assert budget - 1 <= tree.tokens_spent <= budget  # it stops with less left than a token per child (2)
        assert len(tree.finished()) >= 3  # several whole answers to choose from, sharing their prefixes
        assert any(len(node.children) > 2 for node in tree.nodes)  # a node sampled again once its children were spent
        for node in tree.nodes:
            if node.exhausted and not node.terminal:  # only a node whose last widening found no new line
                assert node.saturated and all(tree.nodes[c].exhausted for c in node.children)
            lines = [tuple(tree.nodes[c].token_ids) for c in node.children]
            assert len(lines) == len(set(lines))  # every line once


def test_an_unfinished_answer_is_completed_within_what_is_left_of_the_budget(policy):
    task = _code_tasks("pyfunc")[0]
    opening = policy.tokenize("```python\n")  # an open line, not an ended reply

    def unfinished(spent: int) -> SearchTree:  # a search that finished no answer: one open line below the root
        return SearchTree(task, policy.encode_prompt(task.chat, task.response_prefix),
                          [Node([], None, False, visits=1, children=[1]), Node(opening, 0, False, visits=1)], spent)

    cut = unfinished(90)
    answer = best_response(cut, policy, 48, token_budget=96)
    assert cut.tokens_spent == 96 and answer.startswith(policy.decode(opening))  # 6 tokens: the function is cut
    free = unfinished(90)
    best_response(free, policy, 48)
    assert free.tokens_spent > 96  # without a budget the same completion runs on
    spent = unfinished(96)
    assert best_response(spent, policy, 48, token_budget=96) == policy.decode(opening) and spent.tokens_spent == 96


def test_kept_prompt_states_give_the_features_of_whole_sequences():
    model = ValueModel(None)
    first, second = "Write a function that adds one.", "Write a function that returns its argument doubled."
    pairs = [(first, ""), (first, "```python\ndef f(x):\n"), (second, "```python\ndef g(x):\n    return 2 * x\n```"),
             (first, "```python\ndef f(x):\n    return x + 1\n```"), (second, "I")]
    with torch.no_grad():
        whole = model.features(pairs)  # every sequence from its first token, left-padded in one batch
    kept = model.kept_prompt_features(pairs, batch_size=2)  # each prompt once, responses from its state
    assert torch.allclose(kept, whole, atol=1e-4)
    again = model.kept_prompt_features(pairs[::-1])  # in another order, from the states the first call kept
    assert torch.allclose(again, whole.flip(0), atol=1e-4)
    windowed = ValueModel("random:qwen2-tiny-sliding")  # a cache of the window only: what the response attends to
    with torch.no_grad():
        whole = windowed.features(pairs)
    assert torch.allclose(windowed.kept_prompt_features(pairs, batch_size=2), whole, atol=1e-4)


def test_value_model_learns_separable_targets_and_round_trips(tmp_path):
    prompt = "Write a function that adds one."
    good = [ValueExample(prompt, f"```python\ndef f(x):\n    return x + 1  # {i}\n```", 1.0) for i in range(6)]
    bad = [ValueExample(prompt, f"I cannot do that {i}.", 0.0) for i in range(6)]
    model = ValueModel(None)
    metrics = model.fit(good + bad, epochs=60, lr=3e-3, batch_size=4)
    assert metrics["value/train_mae"] < 0.2
    pairs = [(prompt, "```python\ndef f(x):\n    return x + 1  # new\n```"), (prompt, "I cannot do that now.")]
    high, low = model.predict(pairs)
    assert high > 0.7 and low < 0.3
    model.save(tmp_path / "vm")
    assert ValueModel.load(tmp_path / "vm").predict(pairs) == pytest.approx([high, low], abs=1e-5)
    with pytest.raises(ValueError, match="must lie in"):
        model.fit([ValueExample(prompt, "x", 2.0)])


def test_a_lora_value_body_trains_its_adapters_and_saves_them_merged(tmp_path):
    prompt = "Write a function that adds one."
    examples = [ValueExample(prompt, f"```python\ndef f(x):\n    return x + 1  # {i}\n```", 1.0) for i in range(2)]
    examples += [ValueExample(prompt, f"I cannot do that {i}.", 0.0) for i in range(2)]
    model = ValueModel(None, body="lora")
    adapters = {n: p.detach().clone() for n, p in model.body.named_parameters() if p.requires_grad}
    assert adapters and all("lora_" in n for n in adapters)  # only the adapters train in the body
    probe = ValueModel(None)  # the head alone on the frozen body: LoRA's first stage, its adapters still zero
    probe.fit(examples, epochs=4, lr=3e-3, batch_size=4, seed=1)
    model.fit(examples, epochs=4, lr=3e-3, batch_size=4, seed=1, body_epochs=0)
    seen = [(e.prompt, e.response) for e in examples]
    assert model.predict(seen) == pytest.approx(probe.predict(seen), abs=1e-5)
    assert all(torch.equal(adapters[n], p) for n, p in model.body.named_parameters() if p.requires_grad)
    features = model.kept_prompt_features(seen)  # the untrained body's
    metrics = model.fit(examples, epochs=4, lr=3e-3, batch_size=4, body_epochs=2, body_lr=1e-3,
                        features=features)  # 2 body steps after the head's 4
    assert metrics["value/train_mae"] < 0.35
    with pytest.raises(ValueError, match="this one has trained"):  # those features no longer hold
        model.fit(examples, features=features)
    trained = dict(model.body.named_parameters())
    assert any(not torch.equal(adapters[n], trained[n]) for n in adapters)
    pairs = [(prompt, "```python\ndef f(x):\n    return x + 1  # new\n```"), (prompt, "I cannot do that now.")]
    before = model.predict(pairs)
    model.save(tmp_path / "vm")
    assert (tmp_path / "vm" / "body" / "config.json").is_file()
    assert ValueModel.load(tmp_path / "vm").predict(pairs) == pytest.approx(before, abs=1e-4)
    with pytest.raises(ValueError, match="body must be one of frozen, lora, full"):
        ValueModel(None, body="half")


def test_a_value_body_of_lower_layers_reads_their_state_and_saves_with_them(tmp_path):
    from transformers import AutoModel

    model = ValueModel(None, depth=0.6)  # 18 of the embedded model's 30 layers
    assert len(model.body.layers) == model.body.config.num_hidden_layers == 18
    prompt, response = "Write a function that adds one.", "```python\ndef f(x):\n    return x + 1\n```"
    whole = AutoModel.from_pretrained(model.body_dir, dtype=torch.float32)
    ids, prompt_len = model._encode(prompt, response)
    with torch.no_grad():
        state = whole(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[18]
        expected = whole.norm(state)[0, prompt_len - 1:].mean(0)  # the full body's layer 18, through its norm
    assert torch.allclose(model.kept_prompt_features([(prompt, response)])[0], expected, atol=1e-4)
    examples = [ValueExample(prompt, f"{response} # {i}", 1.0) for i in range(2)]
    examples += [ValueExample(prompt, f"I cannot do that {i}.", 0.0) for i in range(2)]
    for body in ("frozen", "lora"):  # a trained body is saved with only its kept layer
        small = ValueModel("random:qwen2-tiny-sliding", body=body, depth=0.5)
        small.fit(examples, epochs=2, batch_size=4)
        before = small.predict([(prompt, response)])
        small.save(tmp_path / body)
        loaded = ValueModel.load(tmp_path / body)
        assert len(loaded.body.layers) == 1 and loaded.predict([(prompt, response)]) == pytest.approx(before, abs=1e-4)
    with pytest.raises(ValueError, match="share of the body's layers it keeps"):
        ValueModel(None, depth=0.0)


def test_decodings_spend_the_token_budget_and_report_it(policy, tasks):
    value_model = ValueModel("random:qwen2-tiny")  # its estimates do not matter here: what the decodings spend does
    budget = 96
    for strategy in ("best_of_n", "vm_mcts"):
        decoding = Decoding(strategy, budget, "value", value_model, SearchConfig(step_tokens=16))
        result = evaluate(policy, tasks, 48, decoding=decoding)
        assert result.decoding == strategy and len(result.records) == len(tasks)
        for task, record in zip(tasks, result.records):
            if strategy == "best_of_n":  # a sample is drawn only while a whole one (48 tokens) still fits
                assert budget - 48 < record["tokens"] <= budget and len(record["candidates"]) >= 2
                scores = value_model.predict([(task.prompt, task.full_response(c)) for c in record["candidates"]])
                assert scores[record["candidates"].index(record["completion"])] == pytest.approx(max(scores), abs=1e-4)
            else:  # the last expansion shares what is left among its 2 children, and an answer the search did
                # not finish is completed greedily with what is left: never over the budget (it once ran 48 over)
                assert budget - 1 <= record["tokens"] <= budget
        assert result.summary()["tokens_per_task"] == pytest.approx(
            sum(r["tokens"] for r in result.records) / len(tasks), abs=0.1)
        if strategy == "best_of_n":  # the same candidates picked again by the tests: right wherever any one is
            oracle = reselect(tasks, result.records, "verifier")
            assert oracle.decoding == "best_of_n:verifier" and oracle.tokens_per_task == result.tokens_per_task
            for task, record in zip(tasks, oracle.records):
                assert record["correct"] == max(correct(verifier_reward(task, c)) for c in record["candidates"])
            with pytest.raises(ValueError, match="records of these very tasks"):
                reselect(tasks[::-1], result.records, "verifier")
    with pytest.raises(ValueError, match="needs a value model"):
        evaluate(policy, tasks, 48, decoding=Decoding("vm_mcts"))


def test_rest_rl_recipe_trains_the_value_model_and_eval_decodes_with_it(tmp_path):
    config = load_config("recipes/rest-rl-code.yaml", [
        "train.steps=1", "control.tasks_per_step=2", "generate.group_size=4", "control.max_new_tokens=24",
        "filter.max_rounds=1", "eval.per_level=1", "eval.levels=[1]", "eval.every=0", "eval.max_new_tokens=24",
        "eval.token_budget=48",
        "value.tasks=2", "value.iterations=1", "value.epochs=5", "logging.progress=false", "train.max_minutes=null",
        "model.lora=true", "model.lora_rank=8", f"logging.runs_dir={tmp_path}", "logging.run_name=rest"])
    trainer = Trainer(config, new_run_dir(config))
    prefixes = find_layer(trainer.curriculum, PrefixCurriculum)  # ReST-GRPO cuts at the policy's own tokens
    assert prefixes is not None and prefixes.tokenize == trainer.policy.tokenize
    summary = trainer.run()
    run_dir = tmp_path / "rest"
    assert set(summary["value"]["decodings"]) == {"best_of_n", "vm_mcts"}
    assert summary["value"]["metrics"]["value/examples"] > 0
    lines = (run_dir / "value_model" / "value_data.jsonl").read_text().splitlines()
    assert len(lines) == summary["value"]["metrics"]["value/examples"]
    for strategy in ("best_of_n", "vm_mcts"):
        records = [json.loads(line) for line in (run_dir / f"eval_after_{strategy}.jsonl").read_text().splitlines()]
        assert len(records) == summary["heldout_tasks"]
    cli = CliRunner()  # the command line in this process: the same code, without an interpreter's start each
    out = tmp_path / "vm"  # the same stage from the command line, for any run or model directory
    made = cli.invoke(app, ["value", str(run_dir), "--out", str(out), "value.tasks=1", "value.iterations=1",
                            "value.epochs=2"])
    assert made.exit_code == 0, made.output[-2000:]
    assert json.loads(made.stdout)["value/examples"] == len((out / "value_data.jsonl").read_text().splitlines())
    done = cli.invoke(app, ["eval", str(run_dir), "eval.decoding=vm_mcts", f"eval.value_model={out}"])
    assert done.exit_code == 0, done.output[-2000:]
    assert json.loads(done.stdout)["decoding"] == "vm_mcts"
    own = cli.invoke(app, ["eval", str(run_dir), "eval.decoding=best_of_n"])  # the run's own value model by default
    assert own.exit_code == 0, own.output[-2000:]
    missing = cli.invoke(app, ["eval", str(run_dir / "model"), "eval.decoding=vm_mcts"])
    assert missing.exit_code == 2 and "needs a value model" in missing.stderr
    # a plain model directory searches the tasks of the recipe it is given (by default the default recipe's)
    as_model = cli.invoke(app, ["value", str(run_dir / "model"), "-c", "recipes/rest-rl-code.yaml", "--out",
                                str(tmp_path / "vm2"), "value.tasks=1", "value.iterations=1", "value.epochs=2"])
    assert as_model.exit_code == 0, as_model.output[-2000:]
    prompts = {json.loads(line)["prompt"] for line in (tmp_path / "vm2" / "value_data.jsonl").read_text().splitlines()}
    assert prompts and all("```python" in prompt for prompt in prompts)  # pyfunc problems, not arithmetic
