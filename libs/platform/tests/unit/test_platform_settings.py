from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsConfigDict

from engram_platform.settings import ServiceSettings, as_config, is_setting, unknown_variables


@dataclass(frozen=True, slots=True)
class Step:
    seeds: int = 5
    window_s: float = 60.0
    thread: tuple[str, ...] = ()
    cache: dict[str, int] = field(default_factory=dict, init=False)  # not the settings'


class StepSettings(BaseModel):
    seeds: int = 5
    window_s: float = 60.0
    thread: str = ""
    budget_s: float = 1.0  # the step's deadline share: not in its config


def test_a_config_takes_the_models_values_by_name() -> None:
    model = StepSettings(seeds=3, window_s=1.5, thread="a,b")
    config = as_config(model, Step, thread=tuple(model.thread.split(",")))
    assert config == Step(seeds=3, window_s=1.5, thread=("a", "b"))


def test_a_config_field_the_model_lacks_is_an_error_naming_it() -> None:
    class Short(BaseModel):
        seeds: int = 5

    with pytest.raises(TypeError, match="Short has no thread, window_s for Step"):
        as_config(Short(), Step)


def test_only_dataclasses_are_configs() -> None:
    with pytest.raises(TypeError, match="not a dataclass"):
        as_config(StepSettings(), StepSettings)


class Nested(BaseModel):
    url: str = ""


class DemoSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="ENGRAM_DEMO_", env_nested_delimiter="__")

    step: Nested = Nested()


def test_a_variable_that_names_no_setting_stops_the_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENGRAM_DEMO_STEP__URL", "x")
    monkeypatch.setenv("ENGRAM_DEMO_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("ENGRAM_OTHER_STEP_URL", "another service's")
    assert DemoSettings().step.url == "x"
    monkeypatch.setenv("ENGRAM_DEMO_STEP_URL", "y")  # a flat name the settings dropped
    with pytest.raises(ValidationError, match="ENGRAM_DEMO_STEP_URL: no such setting"):
        DemoSettings()


def test_setting_paths_go_through_nested_models() -> None:
    assert is_setting(DemoSettings, "STEP__URL")
    assert is_setting(DemoSettings, "tls__cert_file")
    assert not is_setting(DemoSettings, "STEP__HOST")
    assert not is_setting(DemoSettings, "STEP_URL")
    assert unknown_variables(DemoSettings, ["ENGRAM_DEMO_STEP", "ENGRAM_DEMO_X", "PATH"]) == [
        "ENGRAM_DEMO_X"
    ]
