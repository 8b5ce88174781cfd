"""The pull workers' instruments (``pull_worker``): batches, settlements, consumer lag.

Counters and histograms are recorded as batches are settled. Consumer lag is read from
JetStream (``consumer_info``, ``stream_info``) by the worker's progress task and kept
here per durable: a metrics collection must never wait on NATS, so the observable gauges
only read the last value. The ``worker`` attribute is the worker's name (ingest,
consolidate, ...), ``durable`` the JetStream consumer's: both a small fixed set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from nats.js import JetStreamContext
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

_meter = metrics.get_meter("engram.worker")

batch_size = _meter.create_histogram(
    "engram.worker.batch.size",
    unit="{event}",
    description="Events per batch handed to a worker.",
    explicit_bucket_boundaries_advisory=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000),
)
events = _meter.create_counter(
    "engram.worker.events",
    unit="{event}",
    description="Events settled by a worker (outcome: acked, retried, dead_lettered).",
)
redeliveries = _meter.create_counter(
    "engram.worker.redeliveries",
    unit="{event}",
    description="Events handed to a worker again (a retry, or a batch a replica abandoned).",
)
dead_letters = _meter.create_counter(
    "engram.worker.dead_letters",
    unit="{event}",
    description="Events dead-lettered (store: the one that refused it; event: invalid alone).",
)


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    pending: int  # in the stream, not yet delivered to the durable
    ack_pending: int  # delivered, not yet settled
    last_sequence: int  # the stream's newest
    ack_floor: int  # every event at and below it is settled

    @property
    def behind(self) -> int:
        """Events between the stream's newest and the ack floor (ingest's watermark lag)."""
        return max(0, self.last_sequence - self.ack_floor)


_lags: dict[str, ConsumerLag] = {}


async def read_lag(js: JetStreamContext, stream: str, durable: str) -> ConsumerLag:
    info = await js.consumer_info(stream, durable)
    state = (await js.stream_info(stream)).state
    return ConsumerLag(
        pending=int(info.num_pending or 0),
        ack_pending=int(info.num_ack_pending or 0),
        last_sequence=int(state.last_seq or 0),
        ack_floor=int(info.ack_floor.stream_seq or 0) if info.ack_floor else 0,
    )


def observed(durable: str, lag: ConsumerLag | None) -> None:
    """Keep the latest lag of ``durable`` for the gauges (None: no longer reported)."""
    if lag is None:
        _lags.pop(durable, None)
    else:
        _lags[durable] = lag


def lag_of(durable: str) -> ConsumerLag | None:
    return _lags.get(durable)


def _gauge(
    read: Callable[[ConsumerLag], int],
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(_: CallbackOptions) -> Iterable[Observation]:
        return [Observation(read(lag), {"durable": d}) for d, lag in list(_lags.items())]

    return observe


_meter.create_observable_gauge(
    "engram.jetstream.consumer.pending",
    callbacks=[_gauge(lambda lag: lag.pending)],
    unit="{message}",
    description="Messages of the stream not yet delivered to the durable consumer.",
)
_meter.create_observable_gauge(
    "engram.jetstream.consumer.ack_pending",
    callbacks=[_gauge(lambda lag: lag.ack_pending)],
    unit="{message}",
    description="Messages delivered to the durable consumer and not yet acknowledged.",
)
