"""Generated webdev tasks (`source: generated`): the grammar, the split, and a sampled task graded
in real Chromium, including pages that hide the oracle's text or move it off the screen.

Rendering is the cost, so only one task is rendered (its reference, the reference graded
directly, the oracle played through the sandboxed tools, an empty page, two hiding variants);
`rlyard envs validate webdev -o source=generated -n 200` covers many (docs/webdev.md).
"""
from __future__ import annotations

import random
import re

import pytest

from rlyard.envs.webdev import generate, template
from rlyard.envs.webdev.render import WORKERS, browser_available
from rlyard.sandbox import bwrap_works

pytestmark = [pytest.mark.timeout(300)]
needs_browser = pytest.mark.skipif(not (browser_available() and bwrap_works()),
                                   reason="needs Debian chromium, nodejs and bubblewrap")


def test_the_pool_holds_enough_specs_and_eval_is_unseen_combinations():
    train, held = generate.specs("train", 3000, 0, 25), generate.specs("eval", 200, 0, 25)
    assert len(train) == 3000 and len(held) == 200
    ids = [generate.spec_id(s) for s in train + held]
    assert len(set(ids)) == len(ids)
    train_combos, held_combos = {generate.combination(s) for s in train}, {generate.combination(s) for s in held}
    assert not train_combos & held_combos  # a held-out combination of sections and counts is never trained on
    assert train_combos | held_combos <= set(generate.all_combinations()) and len(generate.all_combinations()) == 300
    again = generate.specs("eval", 200, 0, 25)
    assert [generate.spec_id(s) for s in again] == ids[3000:]  # deterministic
    assert {generate.spec_id(s) for s in generate.specs("eval", 50, 1, 25)} != set(ids[3000:3050])  # the seed matters


def test_brief_page_and_checks_agree():
    for spec in generate.specs("train", 40, 0, 25):
        brief, html = template.brief(spec), template.page(spec)["index.html"]
        texts = [spec["title"], *spec["nav"], spec["footer"], *spec.get("cards", []), *spec.get("list", []),
                 *spec.get("hero", {}).values(), *spec.get("form", {}).get("fields", [])]
        assert all(text in brief and text in html for text in texts)
        assert len(html) < 1400 and len(brief) < 800  # a page that fits a few hundred tokens
        kinds = [c["kind"] for c in template.checks(spec)]
        assert kinds.count("visual") == 1 and "contrast" in kinds
        positions = [brief.index(f"- {name}:") for name in spec["sections"]]
        assert positions == sorted(positions)  # the brief lists the sections in page order


def test_variants_change_the_markup_not_the_content():
    spec = generate.specs("train", 1, 0, 25)[0]
    reference = template.page(spec)
    visible = lambda files: re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", files["index.html"].split("</head>")[1])).strip()  # noqa: E731
    variants = [template.page(spec, template.variant(random.Random(k))) for k in range(20)]
    assert len({v["index.html"] for v in variants}) > 15
    assert all(visible(v).replace("&copy;", "\u00a9") == visible(reference) for v in variants)


def test_the_oracle_names_each_section_in_the_briefs_order():
    import importlib

    from rlyard.types import Task

    oracle = importlib.import_module("rlyard.envs.webdev.oracle")
    for k, spec in enumerate(generate.specs("train", 30, 0, 25)):
        task = Task(id=generate.spec_id(spec), prompt=[], env="webdev", payload={"spec": spec, "tool_format": "bash_block"})
        write = oracle.oracle(task, random.Random(k))[0]
        names = ["header", *spec["sections"], "footer"]
        assert write.startswith("Sections: " + ", ".join(names) + ".\n")
        assert re.findall(r"<!-- (\w+) -->", write) == [*spec["sections"], "footer"]  # the plan's entries in page order
        assert "<!-- footer -->\n</main>" in write
    assert "<!--" not in template.page(spec)["index.html"]  # the reference (and its cached screenshot) has none


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """One held-out generated task whose reference lives in a fresh cache (so it is rendered here)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("RLYARD_CACHE", str(tmp_path_factory.mktemp("cache")))
    from rlyard.envs.webdev.tasks import make_tasks

    tasks = make_tasks("eval", 2, 0, source="generated", tool_format="bash_block",
                       screenshot_dir=str(tmp_path_factory.mktemp("shots")))
    yield next(t for t in tasks if "cards" in t.payload["spec"]["sections"] or t is tasks[-1])
    WORKERS.close()
    patch.undo()


@needs_browser
def test_a_generated_task_is_sound(generated):
    from rlyard.envs.webdev.validate import check_task

    check = check_task(generated)  # reference direct and played (a drawn variant, bash heredoc), empty page
    assert check.ok, check.error
    assert check.fixed_reward == 1.0 and check.base_reward == 0.0


@needs_browser
@pytest.mark.parametrize("rule, reason", [("* { -webkit-text-fill-color: transparent }", "hidden_text"),
                                          ("body { position: relative; left: 3000px }", "blank_page")])
def test_hidden_or_offscreen_oracle_page_scores_zero(generated, tmp_path, rule, reason):
    from rlyard.envs.webdev.verify import grade_dist

    files = template.page(generated.payload["spec"])
    (tmp_path / "index.html").write_text(files["index.html"].replace("</style>", rule + "\n</style>"))
    reward = grade_dist(tmp_path, generated.payload, generated.id)
    assert reward.value == 0.0 and reward.components.get(reason) == 1.0, (reward.components, reward.info.get("reason"))
