"""Presets in Chromium, as a person uses them: settings saved as a preset, a new conversation, the preset applied
and the answer written with it; the preset still there after a refresh; exported to a file, deleted, and imported
from that file again."""

from __future__ import annotations

import json

from playwright.sync_api import expect

from tests.helpers import choose, generation_settings, model_loaded, open_popover, readme_screenshot, settle

PIRATE = "Answer like a pirate, in one sentence."


def _choose_preset(page, section, name: str) -> None:
    choose(page, section.get_by_test_id("stSelectbox").filter(has_text="Preset"), name)


def _manage(page, section) -> None:
    """The presets' Manage popover, opened (a rerun in flight when it is clicked can close it again)."""
    open_popover(page, section.get_by_role("button", name="Manage"),
                 page.get_by_role("button", name="Export my presets"))


def test_a_preset_is_saved_applied_in_a_new_conversation_exported_and_imported(app_url, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(app_url)
    model_loaded(page, 120_000)
    section = generation_settings(page)
    prompt = section.get_by_label("System prompt")
    prompt.fill(PIRATE)
    tokens = section.get_by_role("spinbutton", name="Max new tokens")
    tokens.fill("40")
    tokens.press("Enter")  # also takes the system prompt, which lost the focus
    _manage(page, section)
    page.get_by_label("Name", exact=True).fill("Pirate")
    page.get_by_label("Name", exact=True).press("Enter")
    page.get_by_role("button", name="Save as a new preset").click()
    expect(page.get_by_text("Saved the preset Pirate")).to_be_visible(timeout=30_000)
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("stPopoverBody")).to_be_hidden()  # while it shows, the sidebar is inert

    sidebar = page.get_by_test_id("stSidebar")
    sidebar.get_by_role("button", name="New conversation").click()
    settle(page, sidebar)  # the new conversation's run redraws the settings
    section = generation_settings(page)
    prompt = section.get_by_label("System prompt")
    prompt.fill("")
    tokens = section.get_by_role("spinbutton", name="Max new tokens")
    tokens.fill("512")
    tokens.press("Enter")
    expect(tokens).to_have_value("512")
    _choose_preset(page, section, "Pirate")
    section.get_by_role("button", name="Apply").click()
    expect(page.get_by_text("Applied Pirate.")).to_be_visible(timeout=30_000)
    expect(section.get_by_label("System prompt")).to_have_value(PIRATE)
    expect(section.get_by_role("spinbutton", name="Max new tokens")).to_have_value("40")
    box = page.get_by_test_id("stChatInputTextArea")
    box.fill("Where is the treasure?")
    box.press("Enter")
    answer = page.locator('[data-testid="stChatMessage"]').nth(1)
    answer.get_by_text("tok/s").first.wait_for(timeout=120_000)
    settle(page, answer)
    expect(answer).to_contain_text(" tokens")
    readme_screenshot(page, "presets.png")

    page.reload()  # the preset is the user's: still there
    model_loaded(page, 120_000)
    section = generation_settings(page)
    _choose_preset(page, section, "Pirate")
    _manage(page, section)
    with page.expect_download() as download:
        page.get_by_role("button", name="Export my presets").click()
    exported = tmp_path / "presets.json"
    download.value.save_as(exported)
    assert [preset["name"] for preset in json.loads(exported.read_text())["presets"]] == ["Pirate"]
    page.get_by_role("button", name="Delete 'Pirate'").click()
    expect(page.get_by_text("Deleted the preset Pirate")).to_be_visible(timeout=30_000)

    _manage(page, section)
    page.get_by_test_id("stPopoverBody").locator('input[type="file"]').set_input_files(str(exported))
    page.get_by_text("presets.json").first.wait_for(timeout=10_000)
    page.get_by_role("button", name="Import", exact=True).click()
    expect(page.get_by_text("Imported 1 preset: 1 new, 0 replaced.")).to_be_visible(timeout=30_000)
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("stPopoverBody")).to_be_hidden()
    _choose_preset(page, section, "Pirate")  # back in the list
    page.close()
