"""The four passes, and the factory that builds the one a key names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engram_consolidate.service.passes.associate import DEFAULT_INCREMENTAL_MAX, AssociatePass
from engram_consolidate.service.passes.base import Pass, Run, Step, Stores
from engram_consolidate.service.passes.cluster import ClusterPass
from engram_consolidate.service.passes.decay import DecayPass
from engram_consolidate.service.passes.forget import ForgetPass
from engram_consolidate.service.records import Key, PassName
from engram_core.associations import AssociationSettings
from engram_core.clusters import ClusterSettings
from engram_core.forgetting import ForgetSettings
from engram_core.relevance import DecaySettings


@dataclass(frozen=True, slots=True)
class PassSettings:
    decay: DecaySettings = field(default_factory=DecaySettings)
    forget: ForgetSettings = field(default_factory=ForgetSettings)
    associate: AssociationSettings = field(default_factory=AssociationSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    cluster_neighbours: int = 10  # neighbours asked per memory when looking for clusters
    associate_incremental_max: int = DEFAULT_INCREMENTAL_MAX  # events; more: a full run


def pass_factory(
    stores: Stores,
    settings: PassSettings,
    maintenance: Callable[[Key], Pass | None] | None = None,
) -> Callable[[Key], Pass]:
    """A new pass object per run (phases keep their state in it); ``maintenance`` builds
    the sync and rebuild passes (service.rebuild.maintenance_factory)."""

    def make(key: Key) -> Pass:
        if maintenance is not None and (other := maintenance(key)) is not None:
            return other
        if key.pass_name is PassName.DECAY:
            return DecayPass(stores, settings.decay)
        if key.pass_name is PassName.FORGET:
            return ForgetPass(stores, settings.decay, settings.forget)
        if key.pass_name is PassName.ASSOCIATE:
            return AssociatePass(stores, settings.associate, settings.associate_incremental_max)
        return ClusterPass(stores, settings.cluster, settings.cluster_neighbours)

    return make


__all__ = [
    "AssociatePass",
    "ClusterPass",
    "DecayPass",
    "ForgetPass",
    "Pass",
    "PassSettings",
    "Run",
    "Step",
    "Stores",
    "pass_factory",
]
