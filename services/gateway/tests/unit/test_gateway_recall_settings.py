"""The recall's nested settings reach the config its steps take, each one of them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from engram_core.validation import Limits
from engram_gateway.config import Settings
from engram_gateway.recall_config import read_config
from engram_gateway.recall_settings import Budget
from engram_gateway.service.postrank import GroupBy

STEPS = ("streams", "relations", "context", "candidates", "scoring", "postrank", "expand")
STEPS += ("graph_rerank",)
# Read by the rule-based decomposer, which build_gateway hands the reader, not by ReadConfig.
NOT_IN_READ_CONFIG = {("candidates", "decompose_max_parts")}


def _other(info: FieldInfo, default: Any) -> Any:
    """A valid value other than ``default``."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, str):
        return "tag:session"
    bound = next((m.le for m in info.metadata if getattr(m, "le", None) is not None), None)
    if isinstance(default, int):
        return default - 1 if bound is not None and default + 1 > bound else default + 1
    return default / 2 if default else 0.5


def _changes() -> list[tuple[str, dict[str, Any]]]:
    """One settings change per leaf of every step's model: (its path, the settings kwargs)."""
    defaults = Settings()
    out = []
    for step in STEPS:
        model: BaseModel = getattr(defaults, step)
        for name, info in type(model).model_fields.items():
            if (step, name) in NOT_IN_READ_CONFIG:
                continue
            value = getattr(model, name)
            if isinstance(value, Budget):
                changed: Any = {"cap_s": value.cap_s / 2}
            else:
                changed = _other(info, value)
            out.append((f"{step}.{name}", {step: {name: changed}}))
    return out


LIMITS = Limits()


@pytest.mark.parametrize(("path", "kwargs"), _changes(), ids=[p for p, _ in _changes()])
def test_every_recall_setting_changes_the_read_config(path: str, kwargs: dict[str, Any]) -> None:
    assert read_config(Settings(**kwargs), LIMITS) != read_config(Settings(), LIMITS), path


def test_the_steps_configs_are_built_from_their_models() -> None:
    s = Settings(
        context={"seeds": 3, "thread": "tag:conv", "budget": {"cap_s": 0.2}},
        postrank={"max_gap": 0.4, "overfetch": 5},
        expand={"per_seed": 7},
        graph_rerank={"damping": 0.5},
        candidates={"max_queries": 4, "decompose": True},
    )
    config = read_config(s, LIMITS)
    assert (config.context.seeds, config.context.thread) == (3, GroupBy("conv", metadata=False))
    assert (config.context_budget.fraction, config.context_budget.cap_s) == (0.3, 0.2)
    assert (config.post.max_gap, config.post.overfetch) == (0.4, 5)
    assert config.expand.per_seed == 7
    assert config.graph_rerank.damping == 0.5
    assert (config.candidates.max_queries, config.candidates.decompose) == (4, True)


def test_the_recall_settings_come_from_env_with_double_underscores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ENGRAM_GATEWAY_CONTEXT__SEEDS", "0")
    monkeypatch.setenv("ENGRAM_GATEWAY_CONTEXT__THREAD", "metadata:thread")
    monkeypatch.setenv("ENGRAM_GATEWAY_POSTRANK__FLOOR_RATIO", "0.25")
    monkeypatch.setenv("ENGRAM_GATEWAY_CONTEXT__BUDGET__CAP_S", "0.2")
    s = Settings()
    assert (s.context.seeds, s.context.thread) == (0, "metadata:thread")
    assert s.context.limit == 64  # the fields not set keep their defaults
    assert s.postrank.floor_ratio == 0.25
    # A step's budget keeps its own default for the field not set, not another step's.
    assert (s.context.budget.fraction, s.context.budget.cap_s) == (0.3, 0.2)
