"""The New run form in a real browser (the studio and browser set-up of tests/test_browser.py; issues 25 and 23): the
settings that belong to one choice appear with it and go with it. RL on the arithmetic env shows no Max turns or
Tools; picking the calculator env (multi-turn) shows both, and a Check with the calculator's settings reads "Ready to
start" with the command's `env=calculator`; going back to arithmetic hides them again. DPO shows its beta and the
chosen replies' loss weight (RPO alpha). No model runs (Check validates only), so this is seconds of page work; the
screenshots land in test-artifacts/new-run-*.png."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout, expect
from test_browser import CHROMIUM, page, shot, studio, wait_idle  # noqa: F401 (page and studio are fixtures)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium (scripts/browser-deps.sh)"),
]


def open_list(box, options) -> None:
    """Open a selectbox's list as a person would: a click, then ArrowDown while it stays shut. A click that lands
    soon after the expander above opened focused the box without opening it (9 runs of 12 here, 2026-11-27). The box
    is scrolled to the middle of the window first: at its bottom edge the list opened below the window and its
    options could not be clicked (2 runs of 6, 2026-11-29)."""
    box.evaluate("element => element.scrollIntoView({block: 'center'})")
    box.click()
    for _ in range(3):
        try:
            options.first.wait_for(timeout=3_000)
            return
        except PlaywrightTimeout:
            box.press("ArrowDown")
    options.first.wait_for()


def tick(tab, label: str) -> None:
    """Click a checkbox as a person does: on its label (the input itself sits hidden under Streamlit's drawing)."""
    tab.locator("[data-testid=stCheckbox]").filter(has_text=re.compile(f"^{re.escape(label)}$")).locator(
        "label"
    ).click()


def choose(tab, label: str) -> None:
    """Click the option of a segmented control (Algorithm, Environment) whose text is `label`."""
    tab.locator("[data-testid=stButtonGroup] button").filter(has_text=re.compile(f"^{re.escape(label)}$")).click()
    wait_idle(tab)


def test_multi_turn_fields_come_and_go_with_the_env_and_dpo_shows_rpo_alpha(studio, page):  # noqa: F811
    page.goto(f"{studio}/new_run")
    page.get_by_role("button", name="Start run").wait_for()
    wait_idle(page)

    choose(page, "Reinforcement (RL)")
    page.get_by_text("Sampling and loss").wait_for()
    assert page.get_by_label("Max turns (multi-turn envs)", exact=True).count() == 0
    assert page.get_by_label("Tools (calculator)", exact=True).count() == 0
    shot(page, "new-run-rl-arithmetic")

    choose(page, "calculator")
    page.get_by_label("Max turns (multi-turn envs)", exact=True).wait_for()
    assert page.get_by_label("Tools (calculator)", exact=True).input_value() == "calculator"
    page.get_by_role("button", name="Check settings").click()
    page.get_by_text("Ready to start").wait_for(timeout=60_000)
    page.get_by_text("env=calculator").first.wait_for()
    shot(page, "new-run-rl-calculator")

    choose(page, "arithmetic")
    page.get_by_label("Max turns (multi-turn envs)", exact=True).wait_for(state="detached")
    page.get_by_label("Tools (calculator)", exact=True).wait_for(state="detached")

    choose(page, "Preference (DPO)")
    page.get_by_label("DPO beta", exact=True).wait_for()
    page.get_by_label("Eval problems", exact=True).wait_for(state="detached")  # RL's settings are gone
    assert float(page.get_by_label("RPO alpha", exact=True).input_value()) >= 0
    shot(page, "new-run-dpo")


def test_distillation_prompts_include_prompt_files_and_a_teacher_equal_to_the_student_is_refused(studio, page):  # noqa: F811
    """On-policy distillation's prompts may be a prompt file (builtin:sums, for an RL teacher); with no checkpoint yet
    the only teacher is the base model, which is the student itself, and Check says so without starting anything."""
    page.goto(f"{studio}/new_run")
    page.get_by_role("button", name="Start run").wait_for()
    wait_idle(page)
    choose(page, "Distillation")
    prompts = page.locator("[data-testid=stSelectbox]").filter(has_text="Prompts").first
    prompts.click()
    options = page.get_by_role("option")
    options.first.wait_for()
    assert {"facts", "sums"} <= {text.strip() for text in options.all_inner_texts()}
    options.filter(has_text=re.compile("^sums$")).click()
    wait_idle(page)
    page.get_by_text("The 288 sums the RL default").wait_for()
    page.get_by_role("button", name="Check settings").click()
    page.get_by_text("the teacher is the student").first.wait_for(timeout=60_000)
    shot(page, "new-run-distill-sums")


def test_an_rl_run_starts_without_an_anchor_and_the_form_turns_one_on(studio, page):  # noqa: F811
    """'Keep what the model knew' (anchor.*): an RL run starts with no anchor (RL's default since its B decays where
    ordinary chats read its fixed A instead: rl/suggested.py) and RL's measured 8 chats a step; picking
    builtin:replay turns it on, Check reads "Ready to start" and the command says so."""
    page.goto(f"{studio}/new_run")
    page.get_by_role("button", name="Start run").wait_for()
    wait_idle(page)
    choose(page, "Reinforcement (RL)")
    wait_idle(page)
    for _ in range(3):  # the first click after the kind changed left it shut (2 runs of 2, 2026-12-02); a second opens
        if page.get_by_label("Anchor chats", exact=True).is_visible():
            break
        page.get_by_text("Keep what the model knew").click()
        page.wait_for_timeout(1000)
    page.get_by_label("Anchor chats", exact=True).wait_for()
    anchor = page.locator("[data-testid=stSelectbox]").filter(has_text="Anchor chats").first
    anchor.scroll_into_view_if_needed()
    assert page.get_by_label("Anchor chats", exact=True).input_value() == "None"  # RL's default
    assert page.get_by_label("Anchor chats per step", exact=True).input_value() == "8"
    options = page.get_by_role("option")
    open_list(anchor.locator("input"), options)
    replay = "builtin:replay (292 ordinary questions, the base model's replies)"
    assert {"None", replay} <= {text.strip() for text in options.all_inner_texts()}
    options.filter(has_text=replay).click()
    wait_idle(page)
    shot(page, "new-run-rl-anchor")
    page.get_by_role("button", name="Check settings").click()
    page.get_by_text("Ready to start").wait_for(timeout=60_000)
    page.get_by_text("anchor.dataset=builtin:replay").first.wait_for()


def test_lora_layers_start_at_each_kinds_default_and_unticking_both_is_refused_by_name(studio, page):  # noqa: F811
    """'LoRA on attention' (a checkbox) / 'LoRA on MLP' (auto, on, off) in the Advanced expander: SL starts with both
    on, RL with MLP on auto (attention only where measured: rl/suggested.train_mlp_used); MLP off and attention
    unticked, Check names both settings and starts nothing; MLP on, the command says train_mlp=true."""
    page.goto(f"{studio}/new_run")
    page.get_by_role("button", name="Start run").wait_for()
    wait_idle(page)
    page.get_by_text("Advanced: seed, optimizer and LoRA layers").click()
    assert page.get_by_label("LoRA on attention", exact=True).is_checked()
    assert page.get_by_label("LoRA on MLP", exact=True).input_value() == "on"

    choose(page, "Reinforcement (RL)")
    page.get_by_text("Sampling and loss").wait_for()
    expander = page.get_by_text("Advanced: seed, optimizer and LoRA layers")
    if not page.get_by_label("LoRA on MLP", exact=True).is_visible():
        expander.click()
    mlp = page.get_by_label("LoRA on MLP", exact=True)
    mlp.wait_for()
    assert mlp.input_value() == "auto" and page.get_by_label("LoRA on attention", exact=True).is_checked()
    mlp_box = page.locator("[data-testid=stSelectbox]").filter(has_text="LoRA on MLP").first

    def pick(option: str) -> None:
        open_list(mlp_box.locator("input"), page.get_by_role("option"))
        page.get_by_role("option", name=option, exact=True).click()
        wait_idle(page)

    pick("off")
    tick(page, "LoRA on attention")
    assert not page.get_by_label("LoRA on attention", exact=True).is_checked()
    page.get_by_role("button", name="Check settings").click()
    page.get_by_text("both false leaves LoRA nothing to train").first.wait_for(timeout=60_000)
    mlp.scroll_into_view_if_needed()
    shot(page, "new-run-lora-layers-refused")
    pick("on")
    assert mlp.input_value() == "on"
    page.get_by_role("button", name="Check settings").click()
    page.get_by_text("Ready to start").wait_for(timeout=60_000)
    page.get_by_text("train_mlp=true").first.wait_for()


def test_edits_survive_a_switch_of_algorithm_and_page_and_a_name_typed_then_checked_at_once(studio, page):  # noqa: F811
    """Odd orders a newcomer tries: type a value and, without checking, peek at another algorithm and another page,
    then come back (the value is still there; before, the settings sat in an st.form and a switch dropped them);
    type a run name and click Check at once, with the cursor still in the box (the command carries the name);
    Reset to defaults puts the defaults back."""
    page.goto(f"{studio}/new_run")
    page.get_by_role("button", name="Start run").wait_for()
    wait_idle(page)
    max_steps = page.get_by_label("Max steps", exact=True)
    choose(page, "Reinforcement (RL)")
    page.get_by_text("Sampling and loss").wait_for()
    page.get_by_label("Epochs", exact=True).wait_for(state="detached")  # the SL form has gone
    max_steps.fill("7")
    max_steps.press("Tab")
    wait_idle(page)
    choose(page, "Supervised (SL)")
    page.get_by_label("Epochs", exact=True).wait_for()
    choose(page, "Reinforcement (RL)")
    page.get_by_label("Epochs", exact=True).wait_for(state="detached")  # the SL form has gone
    expect(max_steps).to_have_value("7", timeout=60_000)
    page.get_by_role("link", name="Runs").first.click()
    wait_idle(page)
    page.get_by_role("link", name="New run").first.click()
    page.get_by_text("Sampling and loss").wait_for()  # the algorithm shown last
    expect(max_steps).to_have_value("7", timeout=60_000)
    page.get_by_label("Run name (optional)", exact=True).fill("typed-then-checked")
    page.get_by_role("button", name="Check settings").click()
    page.get_by_text("Ready to start").wait_for(timeout=60_000)
    page.get_by_text("name=typed-then-checked").first.wait_for()
    page.get_by_text("max_steps=7").first.wait_for()
    shot(page, "new-run-kept-edits")
    page.get_by_role("button", name="Reset to defaults").click()
    page.get_by_role("button", name="Reset to defaults").wait_for(state="detached")  # nothing edited now
    wait_idle(page)
    expect(page.get_by_label("Run name (optional)", exact=True)).to_have_value("", timeout=60_000)
    expect(max_steps).not_to_have_value("7", timeout=60_000)


def lora_input_side(page, studio: str, algorithm: str):  # noqa: F811 (the fixtures, passed on)
    """The New run form of `algorithm` with its 'LoRA input side (A)' select in view, checked to start on auto."""
    page.goto(f"{studio}/new_run")
    page.get_by_role("button", name="Start run").wait_for()
    wait_idle(page)
    choose(page, algorithm)
    box = page.locator("[data-testid=stSelectbox]").filter(has_text="LoRA input side (A)").first
    box.scroll_into_view_if_needed()
    assert page.get_by_label("LoRA input side (A)", exact=True).input_value() == "auto"
    return box


def test_rls_lora_input_side_starts_on_auto_and_trained_reaches_the_command(studio, page):  # noqa: F811
    """'LoRA input side (A)' (lora_a): an RL run starts on auto (null_space for the default model on the arithmetic
    env: training/null_space.py) and lists trained and null_space; picking trained, Check reads "Ready to start" with
    lora_a=trained in the command."""
    box = lora_input_side(page, studio, "Reinforcement (RL)")
    shot(page, "new-run-rl-lora-a")
    options = page.get_by_role("option")
    open_list(box.locator("input"), options)
    assert {"auto", "trained", "null_space"} <= {text.strip() for text in options.all_inner_texts()}
    options.filter(has_text=re.compile("^trained$")).click()
    wait_idle(page)
    page.get_by_role("button", name="Check settings").click()
    page.get_by_text("Ready to start").wait_for(timeout=60_000)
    page.get_by_text("lora_a=trained").first.wait_for()


def test_dpos_lora_input_side_starts_on_auto_and_resolves_to_null_space(studio, page):  # noqa: F811
    """DPO's 'LoRA input side (A)' starts on auto (null_space for the default model on builtin:concise-prefs:
    training/lora_a.py), and Check reads "Ready to start"."""
    lora_input_side(page, studio, "Preference (DPO)")
    page.get_by_role("button", name="Check settings").click()
    page.get_by_text("Ready to start").wait_for(timeout=60_000)
    shot(page, "new-run-dpo-lora-a")


def test_sls_lora_input_side_and_rank_start_on_auto_at_the_measured_rank_and_the_check_names_another(studio, page):  # noqa: F811
    """SL's 'LoRA input side (A)' starts on auto (null_space for the default model on builtin:facts, the default
    data) and LoRA rank on auto, named with the rank it trains there (8, measured for it); Check reads "Ready to
    start" with no lora_rank in the command (`cookbook sl` trains 8 on the facts itself). Picking rank 32, Check
    names it as far from the measured rank 8 (sl/suggested.py)."""
    lora_input_side(page, studio, "Supervised (SL)")
    assert page.get_by_label("LoRA rank", exact=True).input_value() == "auto (8, measured)"
    page.get_by_role("button", name="Check settings").click()
    page.get_by_text("Ready to start").wait_for(timeout=60_000)
    assert page.get_by_text("lora_rank=", exact=False).count() == 0
    assert page.get_by_text("measured at rank 8", exact=False).count() == 0
    shot(page, "new-run-sl-lora-a")
    box = page.locator("[data-testid=stSelectbox]").filter(has_text="LoRA rank").first
    options = page.get_by_role("option")
    open_list(box.locator("input"), options)
    options.filter(has_text=re.compile("^32$")).click()
    wait_idle(page)
    page.get_by_role("button", name="Check settings").click()
    page.get_by_text("LoRA rank 32 with lora_a=null_space: measured at rank 8", exact=False).first.wait_for()
    shot(page, "new-run-sl-rank-32")
