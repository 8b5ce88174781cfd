"""The settings reference in each service README is the one `make docs` writes from the
settings models (tools/gen_settings_docs.py): a setting added, renamed or redescribed
without regenerating fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import BaseModel, Field
from pydantic_settings import SettingsConfigDict

from engram_platform.settings import ServiceSettings
from engram_testing.devstack import START_ORDER
from engram_testing.settings_docs import BEGIN, END, rows, settings_table, with_table

TOOL = Path(__file__).resolve().parents[2] / "tools" / "gen_settings_docs.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_settings_docs", TOOL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("service", START_ORDER)
def test_the_readme_holds_the_generated_settings_reference(service: str) -> None:
    committed, generated = _tool().generated(service)
    assert committed == generated, f"services/{service}/README.md is stale: run `make docs`"


@pytest.mark.parametrize("service", START_ORDER)
def test_every_setting_has_a_description(service: str) -> None:
    settings = _tool().settings_of(service)
    prefix = str(settings.model_config["env_prefix"])
    assert [r.variable for r in rows(settings, prefix) if not r.description] == []


class Step(BaseModel):
    seeds: int = Field(5, description="Best candidates read.")


class DemoSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="ENGRAM_DEMO_", env_nested_delimiter="__")

    step: Step = Field(default_factory=lambda: Step(seeds=3), description="The step.")
    mode: str = Field("a|b", description="Either.")


def test_rows_name_the_nested_variables_with_the_parents_defaults() -> None:
    table = settings_table(DemoSettings)
    assert "| `ENGRAM_DEMO_STEP__…` |  |  | The step. |" in table
    assert "| `ENGRAM_DEMO_STEP__SEEDS` | int | `3` | Best candidates read. |" in table
    assert "| `ENGRAM_DEMO_MODE` | str | `a\\|b` | Either. |" in table
    assert "| `ENGRAM_DEMO_DATA_DIR` | path | `$ENGRAM_HOME/data` |" in table


def test_only_the_text_between_the_markers_is_rewritten() -> None:
    readme = f"# demo\n\nprose\n\n{BEGIN}\n| old |\n{END}\n\nmore prose\n"
    assert (
        with_table(readme, "| new |")
        == f"# demo\n\nprose\n\n{BEGIN}\n| new |\n{END}\n\nmore prose\n"
    )
    with pytest.raises(ValueError, match="GENERATED SETTINGS"):
        with_table("# no markers\n", "| new |")
