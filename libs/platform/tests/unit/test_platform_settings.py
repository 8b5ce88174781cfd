from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from pydantic import BaseModel

from engram_platform.settings import as_config


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
