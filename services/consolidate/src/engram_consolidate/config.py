"""Settings of the consolidate worker (env prefix ENGRAM_CONSOLIDATE_, nested with ``__``).

E.g. ``ENGRAM_CONSOLIDATE_NATS__URL=nats://10.0.0.5:4222``,
``ENGRAM_CONSOLIDATE_DECAY__RATE=0.02``, ``ENGRAM_CONSOLIDATE_FORGET__ARCHIVE_BELOW=0.1``,
``ENGRAM_CONSOLIDATE_SCHEDULE__ASSOCIATE_INTERVAL_S=0`` (off).

The constants of the pass rules are the fields of engram_core's settings dataclasses; the
models below mirror them with the same names, defaults and descriptions, and build the
dataclass (whose checks then apply) with ``core()``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import SettingsConfigDict

from engram_consolidate.service.passes.associate import DEFAULT_INCREMENTAL_MAX
from engram_core.associations import AssociationSettings
from engram_core.clusters import ClusterSettings
from engram_core.forgetting import ForgetSettings
from engram_core.relevance import DecaySettings, descriptions
from engram_embed.factory import EmbedSettings
from engram_platform.lexicons import EntitySettings
from engram_platform.settings import (
    STORE_MAX_ITEMS,
    CacheSettings,
    MetricsSettings,
    WorkerSettings,
    metrics_on,
)

_D, _DD = DecaySettings(), descriptions(DecaySettings)
_F, _FD = ForgetSettings(), descriptions(ForgetSettings)
_A, _AD = AssociationSettings(), descriptions(AssociationSettings)
_C, _CD = ClusterSettings(), descriptions(ClusterSettings)


class _Section(BaseModel):
    """A nested block of settings: unknown keys are refused, values fixed once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _Rules(_Section):
    def _fields(self) -> dict[str, Any]:
        return self.model_dump()

    @model_validator(mode="after")
    def _valid(self) -> _Rules:
        self.core()  # the dataclass's own checks (ValueError → a settings error)
        return self

    def core(self) -> Any:
        raise NotImplementedError


class Decay(_Rules):
    rate: float = Field(_D.rate, description=_DD["rate"])
    recent_access_days: float = Field(_D.recent_access_days, description=_DD["recent_access_days"])
    access_rate: float = Field(_D.access_rate, description=_DD["access_rate"])
    relation_weight: float = Field(_D.relation_weight, description=_DD["relation_weight"])
    base: float = Field(_D.base, description=_DD["base"])
    access_weight: float = Field(_D.access_weight, description=_DD["access_weight"])
    importance_offset: float = Field(_D.importance_offset, description=_DD["importance_offset"])
    confidence_base: float = Field(_D.confidence_base, description=_DD["confidence_base"])
    confidence_weight: float = Field(_D.confidence_weight, description=_DD["confidence_weight"])
    floor_per_importance: float = Field(
        _D.floor_per_importance, description=_DD["floor_per_importance"]
    )
    ceiling: float = Field(_D.ceiling, description=_DD["ceiling"])
    epsilon: float = Field(_D.epsilon, description=_DD["epsilon"])

    def core(self) -> DecaySettings:
        return DecaySettings(**self._fields())


class Forget(_Rules):
    archive_below: float | None = Field(_F.archive_below, description=_FD["archive_below"])
    delete_below: float | None = Field(_F.delete_below, description=_FD["delete_below"])
    protect_tags: tuple[str, ...] = Field(_F.protect_tags, description=_FD["protect_tags"])
    protect_metadata_keys: tuple[str, ...] = Field(
        _F.protect_metadata_keys, description=_FD["protect_metadata_keys"]
    )
    protected_types: frozenset[str] = Field(_F.protected_types, description=_FD["protected_types"])
    protect_importance: float = Field(_F.protect_importance, description=_FD["protect_importance"])
    protect_younger_than_days: float = Field(
        _F.protect_younger_than_days, description=_FD["protect_younger_than_days"]
    )
    protect_updated_within_days: float = Field(
        _F.protect_updated_within_days, description=_FD["protect_updated_within_days"]
    )

    def core(self) -> ForgetSettings:
        return ForgetSettings(**self._fields())


_MODELS_OWN = (
    " Unset: the embedding model's own (`embed`'s model in engram_embed.paths.SIMILAR_COSINE), "
    "else the default model's."
)


class Associate(_Rules):
    similar_min_cosine: float | None = Field(
        None, description=_AD["similar_min_cosine"] + _MODELS_OWN
    )
    similar_max_per_memory: int = Field(
        _A.similar_max_per_memory, description=_AD["similar_max_per_memory"]
    )
    sequence_key: str = Field(_A.sequence_key, description=_AD["sequence_key"])
    preceded_window_hours: float = Field(
        _A.preceded_window_hours, description=_AD["preceded_window_hours"]
    )
    preceded_max: int = Field(_A.preceded_max, description=_AD["preceded_max"])
    preceded_min_strength: float = Field(
        _A.preceded_min_strength, description=_AD["preceded_min_strength"]
    )
    strength_epsilon: float = Field(_A.strength_epsilon, description=_AD["strength_epsilon"])
    incremental_max: int = Field(
        DEFAULT_INCREMENTAL_MAX,
        ge=0,
        description="Most memory events an incremental run reads from the log; a tenant "
        "that took more since the last run gets a full run.",
    )

    def _fields(self) -> dict[str, Any]:
        return self.model_dump(exclude={"incremental_max"})

    def core(self, model_cosine: float | None = None) -> AssociationSettings:
        """The rules, with ``model_cosine`` (the embedding model's) when the cosine is unset."""
        fields = self._fields()
        if fields["similar_min_cosine"] is None:
            fields["similar_min_cosine"] = model_cosine or _A.similar_min_cosine
        return AssociationSettings(**fields)


class Cluster(_Rules):
    min_cosine: float | None = Field(None, description=_CD["min_cosine"] + _MODELS_OWN)
    min_size: int = Field(_C.min_size, description=_CD["min_size"])
    max_size: int = Field(_C.max_size, description=_CD["max_size"])
    split_step: float = Field(_C.split_step, description=_CD["split_step"])
    min_jaccard: float = Field(_C.min_jaccard, description=_CD["min_jaccard"])
    summary_keywords: int = Field(_C.summary_keywords, description=_CD["summary_keywords"])
    summary_sentences: int = Field(_C.summary_sentences, description=_CD["summary_sentences"])
    summary_max_chars: int = Field(_C.summary_max_chars, description=_CD["summary_max_chars"])
    tag_min_share: float = Field(_C.tag_min_share, description=_CD["tag_min_share"])
    neighbours: int = Field(
        10,
        ge=0,
        description="Neighbours asked per memory when looking for clusters (pairs kept: at "
        "most memories × this, in memory during the pass).",
    )

    def _fields(self) -> dict[str, Any]:
        return self.model_dump(exclude={"neighbours"})

    def core(self, model_cosine: float | None = None) -> ClusterSettings:
        """The rules, with ``model_cosine`` (the embedding model's) when the cosine is unset."""
        fields = self._fields()
        if fields["min_cosine"] is None:
            fields["min_cosine"] = model_cosine or _C.min_cosine
        return ClusterSettings(**fields)


class Schedule(_Section):
    """When passes run by themselves (a request through the gateway runs one at once)."""

    tick_s: float = Field(
        60.0, gt=0, description="How often tenants are visited for due, requested or orphaned runs."
    )
    decay_interval_s: float = Field(
        86_400.0, ge=0, description="Decay runs this long after its last run ended (0: off)."
    )
    associate_interval_s: float = Field(
        3_600.0, ge=0, description="Associate runs this long after its last run ended (0: off)."
    )
    associate_full_interval_s: float = Field(
        86_400.0,
        ge=0,
        description="A full associate run at least this often; the scheduled runs in between "
        "read only the memories written since the run before (0: every run is full).",
    )
    cluster_interval_s: float = Field(
        604_800.0, ge=0, description="Cluster runs this long after its last run ended (0: off)."
    )
    forget_interval_s: float = Field(
        0.0,
        ge=0,
        description="Forget runs this long after its last run ended (0: off; it also needs "
        "forget.archive_below to change anything).",
    )
    failure_retry_s: float = Field(
        600.0, gt=0, description="A failed run is started afresh this long after it failed."
    )
    max_concurrent: int = Field(
        2,
        ge=1,
        description="Most passes one replica runs at once (over all tenants); requested "
        "runs go first and may take one slot more.",
    )


class StateKeeper(_Section):
    """The latest-state log ENGRAM_STATE and its keeper (one replica, under a lease)."""

    enabled: bool = Field(
        True, description="Run the state keeper here (the replica holding its lease keeps it)."
    )
    batch_size: int = Field(
        512, ge=1, le=10_000, description="Log events folded into one round of state writes."
    )
    fetch_wait_s: float = Field(
        1.0, gt=0, description="How long an idle fetch of the keeper waits for events."
    )
    publish_concurrency: int = Field(
        256, ge=1, description="State messages in flight to the log at once."
    )


class Rebuilds(_Section):
    """Sync and Rebuild (drift repair and rebuild by replay from ENGRAM_STATE)."""

    final_wait_s: float = Field(
        600.0,
        gt=0,
        description="After the swap, longest wait for the state keeper to pass the log's end "
        "at the swap before the final replay (the run fails after it, and is resumed later).",
    )
    embed_timeout_s: float = Field(60.0, gt=0, description="Deadline of one embedder call.")


class Settings(WorkerSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_CONSOLIDATE_", env_nested_delimiter="__", extra="ignore"
    )
    metrics: MetricsSettings = metrics_on(9470)

    batch_size: int = Field(
        256,
        ge=1,
        le=4096,
        description="Most access events folded into one round of writes (one per memory).",
    )
    batch_wait_s: float = Field(
        0.1,
        gt=0,
        description="After the first event, how long to wait for more to fold into the batch.",
    )
    max_ack_pending: int = Field(
        5000, ge=1, description="Events delivered but not yet acked, over all replicas."
    )
    read_chunk: int = Field(
        100,
        ge=1,
        le=1000,
        description="Ids per store read, each with its own deadline: vector get (access "
        "counts, a pass's memories) and graph relations (a pass's edges).",
    )
    write_chunk: int = Field(
        STORE_MAX_ITEMS,
        ge=1,
        le=STORE_MAX_ITEMS,
        description="Access updates per store write; a batch folding more memories writes "
        "several chunks at once (the stores take at most 1000 a call).",
    )

    # Passes
    page_size: int = Field(
        64, ge=1, le=1000, description="Memories per page of a pass (one checkpoint per page)."
    )
    page_pause_s: float = Field(
        0.0, ge=0, description="Pause between two pages of a pass, to spare the stores."
    )
    pass_duty: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Share of a pass's wall time spent working: after a page that took t "
        "seconds it pauses t * (1 - duty) / duty, leaving the stores the rest for recall.",
    )
    page_retries: int = Field(
        3,
        ge=0,
        description="Times a page that failed on a store or the log is redone from the last "
        "checkpoint before the run is marked failed.",
    )
    page_retry_base_s: float = Field(
        1.0, gt=0, description="Wait before the first redo of a page; doubles with each."
    )
    publish_concurrency: int = Field(
        64, ge=1, description="Events of one page a pass has in flight to the log at once."
    )
    samples: int = Field(
        10, ge=0, le=1000, description="Ids kept per kind of change for reports (dry runs too)."
    )
    lease_ttl_s: float = Field(
        30.0,
        gt=0,
        description="TTL of a pass's lease, renewed every third of it; another replica "
        "takes over a dead holder's run after it.",
    )
    cache: CacheSettings = Field(
        default_factory=CacheSettings,
        description="Where leases live: memory (one replica only) or redis (shared).",
    )
    schedule: Schedule = Field(default_factory=Schedule, description="When passes run.")
    decay: Decay = Field(default_factory=Decay, description="The relevance_score formula.")
    forget: Forget = Field(default_factory=Forget, description="Archive and delete thresholds.")
    associate: Associate = Field(
        default_factory=Associate, description="SIMILAR_TO and PRECEDED_BY rules."
    )
    cluster: Cluster = Field(default_factory=Cluster, description="MetaPattern clusters.")
    state: StateKeeper = Field(
        default_factory=StateKeeper, description="The latest-state log and its keeper."
    )
    rebuild: Rebuilds = Field(default_factory=Rebuilds, description="Sync and Rebuild.")
    embed: EmbedSettings = Field(
        default_factory=EmbedSettings,
        description="Embedder of Sync's vector repairs and of Rebuild{vector}: the one ingest "
        "uses (built on first use only).",
    )
    next_embed: EmbedSettings | None = Field(
        None,
        description="A second embedder Rebuild{vector, embedding_model} may name: the model "
        "being rolled in (built on first use only).",
    )
    entities: EntitySettings = Field(
        default_factory=EntitySettings,
        description="Entity extraction of Sync and Rebuild's replays: ingest's, or a replayed "
        "memory gets other entity tags than ingest gave it.",
    )

    @model_validator(mode="after")
    def _ack_wait_covers_a_batch(self) -> Settings:
        if self.ack_wait_s <= 3 * self.write_timeout_s:
            raise ValueError("ack_wait_s must exceed 3 * write_timeout_s")
        return self
