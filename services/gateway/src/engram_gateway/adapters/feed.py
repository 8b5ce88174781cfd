"""ChangeFeed on JetStream: one ephemeral pull consumer per subscriber on the tenant's
memory subjects, deleted when the subscriber goes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from engram_core.errors import Unavailable
from engram_core.log_events import Event
from engram_platform import jetstream
from engram_platform.log_events import decode

log = logging.getLogger(__name__)

# The server drops a consumer nobody pulled from this long (a gateway that died holding it).
_INACTIVE_S = 60.0


class JetStreamFeed:
    def __init__(self, js: JetStreamContext, batch: int = 64, wait_s: float = 5.0) -> None:
        self._js = js
        self._batch = batch
        self._wait = wait_s  # one pull's longest wait; a quiet tenant costs one pull per wait

    def _config(self, tenant: str, after: int | None) -> ConsumerConfig:
        return ConsumerConfig(
            ack_policy=AckPolicy.NONE,
            deliver_policy=DeliverPolicy.NEW if after is None else DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=None if after is None else after + 1,
            filter_subject=jetstream.subject(tenant, "*"),
            inactive_threshold=_INACTIVE_S,
            mem_storage=True,
        )

    async def events(self, tenant: str, after: int | None) -> AsyncIterator[Event]:
        stream = jetstream.STREAM_MEMORY
        try:
            info = await self._js.add_consumer(stream, self._config(tenant, after))
            sub = await self._js.pull_subscribe_bind(info.name, stream=stream)
        except Exception as exc:
            raise Unavailable(f"cannot read {stream}: {exc!r}") from exc
        delivered = 0
        try:
            while True:
                try:
                    msgs = await sub.fetch(self._batch, timeout=self._wait)
                except (TimeoutError, nats.errors.TimeoutError):
                    continue  # nothing new yet
                except Exception as exc:
                    raise Unavailable(f"cannot read {stream}: {exc!r}") from exc
                for m in msgs:
                    # Without acks a pull that timed out in flight loses what it carried:
                    # say so rather than skip it (the client resumes from its last sequence).
                    if m.metadata.sequence.consumer != delivered + 1:
                        raise Unavailable(f"{stream} feed lost an event; resume from the last")
                    delivered = m.metadata.sequence.consumer
                    decoded = decode(m.subject, m.data, m.metadata.sequence.stream)
                    if decoded.event is None:  # ingest dead-letters it; nothing to show
                        log.debug("feed skips an event: %s", decoded.problem)
                        continue
                    yield decoded.event
        finally:
            try:  # else it lingers until the inactive threshold
                await sub.unsubscribe()
                await self._js.delete_consumer(stream, info.name)
            except Exception as exc:
                log.debug("feed reader cleanup on %s: %s", stream, exc)
