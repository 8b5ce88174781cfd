"""A worker on a durable JetStream pull consumer: fetch batches, settle every message.

The mechanism the ingest and consolidate workers share. Each subclasses ``PullWorker``
and says what to do with a batch (``handle``: one ``Settlement`` per message, in
order; ``apply_decoded`` does the usual decode-then-apply merge); this module does
the rest:

- the durable has explicit acks and unlimited redeliveries, so its ack floor never
  passes an event that is not settled (ingest's watermark is that ack floor);
- a fetch waits for one message, then takes what else is ready up to the batch size;
- while a batch is handled, every message of it is marked in progress every third of
  ack_wait, so ack_wait can be short: only a dead replica's batch is redelivered, soon;
- APPLIED is acked; RETRY is nak'd with an exponential backoff by delivery count
  (or dead-lettered once delivered ``max_deliveries`` times, when the worker set a bound);
  POISON is copied to the dead-letter stream with ``Engram-*`` headers (the reason, the
  store that refused it, where it came from), then termed: it is decided, so the ack floor
  moves past it;
- on stop the batch in hand is finished and what was delivered but not started is
  nak'd, so another replica takes it now rather than after ack_wait.

``run_worker`` is the process around it: connect, ensure streams, serve the gRPC health
service on the worker's port while it consumes, run until SIGINT/SIGTERM, drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from engram_core.outcomes import Outcome, Result
from engram_platform import jetstream as jsm
from engram_platform import worker_metrics as wm
from engram_platform.grpc_server import start_health
from engram_platform.logs import tenant_context
from engram_platform.settings import WorkerSettings

# Headers of a dead-lettered copy; the payload is the original, byte for byte.
REASON_HEADER = "Engram-Dead-Letter-Reason"
# Who refused it: "vector", "lexical", "graph", "embedding"; "" when decided from the event.
STORE_HEADER = "Engram-Dead-Letter-Store"
ORIGINAL_SUBJECT_HEADER = "Engram-Original-Subject"
ORIGINAL_STREAM_HEADER = "Engram-Original-Stream"
ORIGINAL_SEQUENCE_HEADER = "Engram-Original-Sequence"
DELIVERIES_HEADER = "Engram-Deliveries"

HAND_BACK_WAIT_S = 0.05


@dataclass(frozen=True, slots=True)
class Settlement:
    outcome: Outcome
    reason: str = ""
    tenant: str = ""  # where a dead-letter copy goes; "" → the "unknown" tenant
    store: str = ""  # who refused a POISON event; "" when decided from the event alone
    max_deliveries: int = 0  # RETRY: dead-letter instead from this delivery on (0: never)


class PullSettings(Protocol):
    """The knobs of a pull worker; every worker's Settings has these fields."""

    @property
    def batch_size(self) -> int: ...
    @property
    def fetch_timeout_s(self) -> float: ...
    @property
    def batch_wait_s(self) -> float: ...
    @property
    def ack_wait_s(self) -> float: ...
    @property
    def max_ack_pending(self) -> int: ...
    @property
    def retry_base_s(self) -> float: ...
    @property
    def retry_max_s(self) -> float: ...
    @property
    def progress_interval_s(self) -> float: ...


E = TypeVar("E")
E_co = TypeVar("E_co", covariant=True)


class Decodable(Protocol[E_co]):
    """A message decoded by a worker: its event, or why it is poison."""

    @property
    def tenant(self) -> str: ...
    @property
    def event(self) -> E_co | None: ...
    @property
    def problem(self) -> str: ...


@dataclass
class Counters:
    acked: int = 0
    retried: int = 0
    poisoned: int = 0  # dead-lettered and termed
    batches: int = 0

    @property
    def applied(self) -> int:
        """What ingest calls acked: an event is acked once it is applied."""
        return self.acked


def backoff_s(num_delivered: int, base_s: float, cap_s: float) -> float:
    """base, 2·base, 4·base, … up to cap — by how often the event was delivered."""
    return float(min(cap_s, base_s * 2 ** min(max(num_delivered, 1) - 1, 32)))


def consumer_config(durable: str, settings: PullSettings) -> ConsumerConfig:
    return ConsumerConfig(
        name=durable,
        durable_name=durable,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=settings.ack_wait_s,
        # Never give up on an event: it waits for its dependency to come back rather
        # than vanish, and the ack floor (ingest's watermark) never passes it.
        max_deliver=-1,
        max_ack_pending=settings.max_ack_pending,
    )


class PullWorker(ABC):
    """One replica of a worker on ``durable`` (shared by all replicas) of ``stream``.

    Logs as the subclass's module, so a worker's lines keep its own logger name.
    """

    detail = ""  # added to the ready line, e.g. the embedding model

    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        name: str,
        stream: str,
        durable: str,
        settings: PullSettings,
    ) -> None:
        self._nc = nc
        self._js = js
        self._name = name
        self._stream = stream
        self._durable = durable
        self._settings = settings
        self.log = logging.getLogger(type(self).__module__)
        self._sub: JetStreamContext.PullSubscription | None = None
        self.counters = Counters()

    @abstractmethod
    async def handle(self, msgs: Sequence[Msg]) -> Sequence[Settlement]:
        """What to do with a batch: one settlement per message, in order.

        Raising leaves the whole batch unsettled: it comes back after ack_wait.
        However long it takes, the batch is kept in hand (in progress) until it returns.
        """

    async def progress(self) -> str:
        """Added to the periodic counts line (e.g. the watermark)."""
        return ""

    async def start(self) -> None:
        """Create or update the durable (same config from every replica) and bind to it."""
        await self._js.add_consumer(self._stream, consumer_config(self._durable, self._settings))
        self._sub = await self._js.pull_subscribe_bind(durable=self._durable, stream=self._stream)
        self.log.info(
            "engram-%s ready: consuming %s as %s (batch %d%s)",
            self._name,
            self._stream,
            self._durable,
            self._settings.batch_size,
            f", {self.detail}" if self.detail else "",
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Handle batches until stop is set; the batch in hand is always finished first."""
        progress = asyncio.create_task(self._report_progress(stop))
        try:
            while not stop.is_set():
                try:
                    msgs = await self.fetch()
                    if msgs:
                        await self.process(msgs)
                except Exception:
                    # The connection reconnects by itself; unacked events come back.
                    self.log.exception("%s batch failed; retrying in a moment", self._name)
                    await asyncio.sleep(min(1.0, self._settings.fetch_timeout_s))
            await self._hand_back()
        finally:
            await self._wind_down(progress)

    async def _wind_down(self, progress: asyncio.Task[None]) -> None:
        """After the last batch: the last counts line, and off the durable."""
        progress.cancel()
        wm.observed(self._durable, None)
        await self._log_progress()
        await self._unsubscribe()

    async def fetch(self, limit: int = 0) -> list[Msg]:
        """Wait for one event, then take what else is ready, up to ``limit`` (the batch
        size by default).

        Two fetches, so the two waits are separate: an idle worker waits up to
        fetch_timeout_s for a first event, and a batch then waits only batch_wait_s
        for more to join it.
        """
        assert self._sub is not None, "start() first"
        limit = limit or self._settings.batch_size
        try:
            first = await self._sub.fetch(1, timeout=self._settings.fetch_timeout_s)
        except TimeoutError:
            return []
        if limit == 1:
            return first
        try:
            rest = await self._sub.fetch(limit - 1, timeout=self._settings.batch_wait_s)
        except TimeoutError:
            rest = []
        return first + rest

    async def process(self, msgs: Sequence[Msg]) -> None:
        """Handle a batch and settle every message of it."""
        attrs = {"worker": self._name}
        wm.batch_size.record(len(msgs), attrs)
        wm.redeliveries.add(sum(m.metadata.num_delivered > 1 for m in msgs), attrs)
        keep = asyncio.create_task(self._keep_in_hand(msgs))
        try:
            settlements = await self.handle(msgs)
        finally:
            keep.cancel()
        decided: list[tuple[str, int]] = []
        for msg, settlement in zip(msgs, settlements, strict=True):
            with tenant_context(settlement.tenant):  # on its retry / dead-letter lines
                settled = await self._settle(msg, settlement)
            if settled and settlement.tenant:
                decided.append((settlement.tenant, msg.metadata.sequence.stream))
        await self._nc.flush()
        self.counters.batches += 1
        if decided:
            await self.on_decided(decided)

    async def on_decided(self, decided: Sequence[tuple[str, int]]) -> None:
        """Called with (tenant, stream sequence) of each message of a batch that was acked
        or dead-lettered, after settling it. Most workers need nothing of it."""
        return

    async def _keep_in_hand(self, msgs: Sequence[Msg]) -> None:
        """Tell the log every third of ack_wait that the batch is still being worked on.

        So ack_wait can be short: a live slow batch is never redelivered, while the batch
        of a replica that died (kill -9, no hand-back) comes back within ack_wait, and the
        ack floor (ingest's watermark) is held that long, not for the slowest batch's time.
        """
        while True:
            await asyncio.sleep(self._settings.ack_wait_s / 3)
            try:
                for msg in msgs:
                    await msg.in_progress()
            except Exception as exc:  # the connection is down: redelivery is then harmless
                self.log.debug("in-progress for the batch in hand failed: %s", exc)

    async def apply_decoded(
        self,
        decoded: Sequence[Decodable[E]],
        apply: Callable[[list[E]], Awaitable[Sequence[Result]]],
    ) -> list[Settlement]:
        """POISON for what did not decode; the events of the rest go through apply."""
        applicable = [(k, d.event) for k, d in enumerate(decoded) if d.event is not None]
        try:
            verdicts = await apply([e for _, e in applicable])
        except Exception as exc:  # a bug, not the events' fault: retry them all
            self.log.exception("%s: applying the batch failed", self._name)
            verdicts = [Result(Outcome.RETRY, f"{type(exc).__name__}: {exc}")] * len(applicable)
        out = [Settlement(Outcome.POISON, d.problem, d.tenant) for d in decoded]
        for (k, _), v in zip(applicable, verdicts, strict=True):
            out[k] = Settlement(v.outcome, v.reason, decoded[k].tenant, v.store, v.max_deliveries)
        return out

    async def _settle(self, msg: Msg, settlement: Settlement) -> bool:
        """Ack, dead-letter or nak; True when the message is decided (acked or termed)."""
        if settlement.outcome is Outcome.APPLIED:
            await msg.ack()
            self.counters.acked += 1
            wm.events.add(1, {"worker": self._name, "outcome": "acked"})
            return True
        deliveries = msg.metadata.num_delivered
        sequence = msg.metadata.sequence.stream
        if 0 < settlement.max_deliveries <= deliveries:
            reason = f"{settlement.reason} (gave up after {deliveries} deliveries)"
            settlement = Settlement(Outcome.POISON, reason, settlement.tenant, settlement.store)
        if settlement.outcome is Outcome.POISON:
            try:
                await self._dead_letter(msg, settlement)
            except Exception as exc:  # keep the event until its copy is safe
                self.log.warning("dead-letter publish failed, will retry: %s", exc)
            else:
                await msg.term()
                self.counters.poisoned += 1
                wm.events.add(1, {"worker": self._name, "outcome": "dead_lettered"})
                wm.dead_letters.add(1, {"worker": self._name, "store": settlement.store or "event"})
                self.log.warning(
                    "dead-lettered %s seq %d: %s", msg.subject, sequence, settlement.reason
                )
                return True
        delay = backoff_s(deliveries, self._settings.retry_base_s, self._settings.retry_max_s)
        await msg.nak(delay=delay)
        self.counters.retried += 1
        wm.events.add(1, {"worker": self._name, "outcome": "retried"})
        self.log.warning(
            "retrying %s seq %d in %.1fs (delivery %d): %s",
            msg.subject,
            sequence,
            delay,
            deliveries,
            settlement.reason,
        )
        return False

    async def _dead_letter(self, msg: Msg, settlement: Settlement) -> None:
        md = msg.metadata
        headers = {k: v for k, v in (msg.headers or {}).items() if not k.startswith("Nats-")}
        headers |= {
            REASON_HEADER: " ".join(settlement.reason.split())[:1000] or "invalid event",
            STORE_HEADER: settlement.store,
            ORIGINAL_SUBJECT_HEADER: msg.subject,
            ORIGINAL_STREAM_HEADER: md.stream,
            ORIGINAL_SEQUENCE_HEADER: str(md.sequence.stream),
            DELIVERIES_HEADER: str(md.num_delivered),
        }
        await jsm.publish(
            self._js,
            jsm.subject(settlement.tenant or "unknown", jsm.DEAD_LETTER),
            msg.data,
            msg_id=f"dead-letter:{md.stream}:{md.sequence.stream}",
            headers=headers,
        )

    async def _hand_back(self, held: Sequence[Msg] = ()) -> None:
        """Release events already delivered to this replica (and ``held``, delivered and
        not started) so another takes them now, not after ack_wait."""
        left: list[Msg] = []
        if self._sub is not None:
            # Before the nak of ``held``, which this fetch would otherwise take again.
            with contextlib.suppress(Exception):
                left = await self._sub.fetch(self._settings.batch_size, timeout=HAND_BACK_WAIT_S)
        try:
            for msg in [*held, *left]:
                await msg.nak()
            await self._nc.flush()
        except Exception as exc:  # not handed back: the log redelivers them after ack_wait
            self.log.debug("hand-back failed: %s", exc)

    async def _unsubscribe(self) -> None:
        # Before the connection drains: nats-py's drain waits forever on a pull
        # subscription's queue (fetch never marks its messages done).
        if self._sub is not None:
            sub, self._sub = self._sub, None
            try:
                await sub.unsubscribe()
            except Exception as exc:
                self.log.debug("unsubscribe failed: %s", exc)

    async def _report_progress(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.refresh_lag()
            await asyncio.sleep(self._settings.progress_interval_s)
            await self._log_progress()

    async def refresh_lag(self) -> None:
        """Read the durable's lag for the gauges (``worker_metrics``); on failure they keep
        the last value read."""
        try:
            wm.observed(self._durable, await wm.read_lag(self._js, self._stream, self._durable))
        except Exception as exc:  # the gauges must never stop the worker
            self.log.debug("consumer lag of %s not read: %s", self._durable, exc)

    async def _log_progress(self) -> None:
        try:
            extra = await self.progress()
        except Exception as exc:  # a progress line must never stop the worker
            extra = f"(progress unavailable: {exc})"
        c = self.counters
        self.log.info(
            "acked=%d retried=%d dead-lettered=%d batches=%d%s",
            c.acked,
            c.retried,
            c.poisoned,
            c.batches,
            f" {extra}" if extra else "",
        )


async def run_worker(
    name: str,
    settings: WorkerSettings,
    make: Callable[[Client, JetStreamContext], PullWorker],
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run until SIGINT/SIGTERM; then finish the batch in hand, drain the connection and
    call on_stop (also when the connection never came up). The health service
    (`grpc_server.start_health`) answers on settings.host:settings.port from the moment
    the worker consumes until it stops."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    try:
        nc, js = await jsm.connect(settings.nats, name)
        try:
            await jsm.ensure_streams(js, settings.nats)
            stop = asyncio.Event()
            for sig in signals:
                loop.add_signal_handler(sig, stop.set)
            worker = make(nc, js)
            await worker.start()
            health = await start_health(name, settings)
            started = time.monotonic()
            try:
                await worker.run(stop)
            finally:
                await health.stop(0)
            worker.log.info("engram-%s stopping after %.0fs", name, time.monotonic() - started)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            await nc.drain()
    finally:
        if on_stop is not None:
            await on_stop()
