"""Vision-language policies (backends/vision.py) on tiny random SmolVLM and Idefics3 models (``random:smolvlm-tiny``,
``random:idefics3-tiny``): an image as tokens gives transformers' own logits, its features train with the policy, and the web environment's
screenshots go through a real training run in headless Chromium."""

from __future__ import annotations

import io
import json

import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText

from autotelic.backends.hf import HFPolicy
from autotelic.backends.vision import IMAGE_MARKER, image_marker
from autotelic.checks import check_run
from autotelic.config import ConfigError, ModelConfig
from autotelic.envs.web.env import WebEnv
from autotelic.envs.web.sites import WebServer
from autotelic.loading import load_config
from autotelic.run_state import new_run_dir
from autotelic.trainer import Trainer
from autotelic.types import Task


@pytest.fixture(scope="module")
def policy() -> HFPolicy:
    return HFPolicy(ModelConfig(path="random:smolvlm-tiny", threads=1), seed=0)


@pytest.fixture(scope="module", params=["smolvlm-tiny", "idefics3-tiny"])
def each_architecture(request) -> HFPolicy:
    return HFPolicy(ModelConfig(path=f"random:{request.param}", threads=1), seed=0)


def png(colour: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (300, 200), colour).save(buffer, "PNG")
    return buffer.getvalue()


def test_an_image_marker_is_the_images_features_as_transformers_merges_them(each_architecture, tmp_path):
    policy = each_architecture
    red = image_marker(png((200, 30, 30)))
    ids = policy.encode_prompt(f"Look: {red} What colour is it?")
    base, seq_len = policy.images.base, policy.images.seq_len
    offsets = [t - base for t in ids if t >= base]
    key = offsets[0] // seq_len
    assert offsets == [key * seq_len + j for j in range(seq_len)]  # the image's key, then each feature
    assert policy.decode(ids) == policy.decode(policy.encode_prompt("Look:  What colour is it?"))
    copy = tmp_path / "copy.png"
    copy.write_bytes(png((200, 30, 30)))
    assert policy.encode_prompt(f"Look: <image:{copy}> What colour is it?") == ids  # ids name the content
    blue_ids = policy.encode_prompt(f"Look: {image_marker(png((30, 30, 200)))} What colour is it?")
    assert len(blue_ids) == len(ids) and blue_ids != ids

    # transformers' own merge: its <image> token where ours stand, and the image's pixels
    standard = [policy.causal_lm.config.image_token_id if t >= base else t for t in ids]
    pixels = policy.images.pixels(key)
    with torch.no_grad():
        ours = policy.causal_lm(input_ids=torch.tensor([ids])).logits
        theirs = policy.causal_lm(input_ids=torch.tensor([standard]), pixel_values=pixels[None, None]).logits
        blue = policy.causal_lm(input_ids=torch.tensor([blue_ids])).logits
    torch.testing.assert_close(ours, theirs)
    first = next(i for i, t in enumerate(ids) if t >= base)
    assert torch.equal(ours[0, :first], blue[0, :first])  # causal: nothing before the image sees it
    assert not torch.allclose(ours[0, -1], blue[0, -1])  # what follows does


def test_image_features_train_with_the_policy_and_images_inside_a_completion_are_read(policy):
    prompt = policy.encode_prompt(f"{image_marker(png((200, 30, 30)))} Describe the page.")
    reply = policy.encode_completion("red")

    def episode(colour: tuple[int, int, int]) -> list[int]:  # a reply, a new page's screenshot, a second reply
        return reply + policy.encode_followup(f"Next page: {image_marker(png(colour))}", after_eos=True) + reply

    later = episode((30, 200, 30))
    logprobs, mask = policy.completion_logprobs([prompt], [later, episode((30, 30, 200))], 2)
    assert mask.all() and torch.isfinite(logprobs).all()
    assert torch.equal(logprobs[0, :len(reply)], logprobs[1, :len(reply)])  # before the second screenshot
    assert not torch.allclose(logprobs[0, -len(reply):], logprobs[1, -len(reply):])  # after it

    policy.zero_grad()
    logprobs[0, :len(reply)].sum().backward()  # the first reply reads only the prompt's image
    vision = [p.grad for p in policy.causal_lm.model.vision_model.parameters()]
    assert any(g is not None and g.abs().sum() > 0 for g in vision)
    policy.zero_grad()


def test_an_observation_naming_a_missing_image_says_so(policy, tmp_path):
    missing = tmp_path / "gone.png"
    with pytest.raises(ValueError, match=f"image {missing} cannot be read"):
        policy.encode_followup(f"<image:{missing}>", after_eos=True)


@pytest.fixture(scope="module")
def server():
    with WebServer() as running:
        yield running


def test_browser_observations_carry_a_screenshot_of_the_page(server):
    env = WebEnv("browser", server, screenshot=True)
    task = Task("Open the cart.", "", "web_shop", 1, "cart", meta={"start": "/shop/", "success": [
        {"url": "/shop/cart"}]})
    first = env.reset(task)
    try:
        text, marker = first.rsplit("\n", 1)
        assert text.endswith(env.observation()) and IMAGE_MARKER.fullmatch(marker)
        with Image.open(IMAGE_MARKER.fullmatch(marker).group(1)) as shot:
            assert shot.format == "PNG" and shot.width >= 800  # the browser's page, as rendered
        step = env.step('click("Blog")')  # no such element: the error, no new screenshot
        assert step.observation.startswith("Error:") and "<image:" not in step.observation
        step = env.step('goto("/forum/")')
        assert IMAGE_MARKER.search(step.observation).group(0) != marker  # another page, another image
    finally:
        env.close()
    with pytest.raises(ValueError, match="screenshots need a browser"):
        WebEnv("html", server, screenshot=True)


@pytest.mark.slow
def test_a_vision_language_policy_trains_on_screenshot_episodes(tmp_path):
    """With LoRA and activation checkpointing, as the web recipe trains."""
    options = ["model.path=random:smolvlm-tiny", "generate.mode=episode", "generate.env=web_screenshot",
               "curriculum.families=[web_shop]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=1",
               "eval.every=0", "train.steps=1", "control.tasks_per_step=1", "generate.group_size=2",
               "control.max_new_tokens=96", "episode.max_turns=2", "episode.turn_tokens=12", "algorithm.lr=1e-3",
               "filter.drop_zero_variance=false", "model.gradient_checkpointing=true", "model.lora=true",
               "logging.progress=false", "train.max_minutes=null", f"logging.runs_dir={tmp_path}",
               "logging.run_name=vlm"]
    config = load_config(None, options)
    run_dir = new_run_dir(config)
    summary = Trainer(config, run_dir).run()
    assert summary["steps"] == 1
    step = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert step["generate/samples"] == 2 and step["filter/kept_groups"] == 1 and step["train/trained_tokens"] > 0
    # the update's forward over the screenshot prompt gives back the log-probs the episodes were sampled with
    assert step["train/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    exported = AutoModelForImageTextToText.from_pretrained(run_dir / "model")  # what transformers loads as a VLM
    assert exported.config.model_type == "smolvlm"

    with pytest.raises(ConfigError, match="generate.env=web_screenshot shows page screenshots"):
        check_run(load_config(None, [o for o in options if not o.startswith("model.path")]))
