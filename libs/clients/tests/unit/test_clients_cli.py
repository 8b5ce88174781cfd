"""`engram recall`, `engram store` and `engram consolidate`: the requests their flags make,
and how they report what went wrong."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, TypeVar

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_clients.cli import main


class Gateway(gateway_pb2_grpc.MemoryServiceServicer):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def Store(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        return gateway_pb2.StoreResponse(id="m2", sequence=7)

    def Recall(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        if request.time_query == "someday":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "time_query: not a time phrase")
        if request.query == "everything":  # more than a pipe holds
            big = common_pb2.Memory(id="m9", content="x" * 4000)
            many = [common_pb2.ScoredMemory(memory=big, score=0.1)] * 100
            return gateway_pb2.RecallResponse(results=many)
        memory = common_pb2.Memory(id="m1", content="Sarah prefers Postgres")
        return gateway_pb2.RecallResponse(
            results=[common_pb2.ScoredMemory(memory=memory, score=0.5)]
        )


class Admin(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def Consolidate(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        return admin_pb2.ConsolidateResponse(run_id="r1", passes=[request.mode])

    def ConsolidationStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        run = admin_pb2.PassRun(
            mode=admin_pb2.CONSOLIDATION_MODE_ASSOCIATE, run_id="r0", done=64, total=128
        )
        return admin_pb2.ConsolidationStatusResponse(
            tenant="acme",
            passes=[
                admin_pb2.PassStatus(mode=admin_pb2.CONSOLIDATION_MODE_ASSOCIATE, last_run=run)
            ],
        )

    def ListDeadLetters(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        if request.after >= 4:
            return admin_pb2.ListDeadLettersResponse(tenant="acme")
        letter = admin_pb2.DeadLetter(sequence=4, reason="tags: more than 64", store="lexical")
        return admin_pb2.ListDeadLettersResponse(tenant="acme", dead_letters=[letter], next_after=4)

    def ReplayDeadLetters(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        if request.tenant == "globex":
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "the token is for tenant 'acme'")
        replays = [
            admin_pb2.ReplayedDeadLetter(sequence=s, new_sequence=90) for s in request.sequences
        ]
        return admin_pb2.ReplayDeadLettersResponse(replayed=len(replays), replays=replays)


_S = TypeVar("_S")


def _serving(fake: _S, add: Callable[[_S, grpc.Server], None]) -> Iterator[tuple[str, _S]]:
    """``fake`` served on a free port: its address, and the fake."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", fake
    finally:
        server.stop(0)


@pytest.fixture
def admin() -> Iterator[tuple[str, Admin]]:
    yield from _serving(Admin(), admin_pb2_grpc.add_AdminServiceServicer_to_server)


def test_consolidate_runs_a_pass_or_shows_their_progress(
    admin: tuple[str, Admin], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake = admin
    assert main(["--addr", addr, "consolidate", "associate", "--dry-run", "--tenant", "t2"]) == 0
    assert '"runId": "r1"' in capsys.readouterr().out
    assert main(["--addr", addr, "consolidate", "all"]) == 0
    assert main(["--addr", addr, "consolidate", "status"]) == 0
    assert '"done": "64"' in capsys.readouterr().out
    run, every, status = fake.seen
    assert (run.mode, run.dry_run, run.tenant) == (
        admin_pb2.CONSOLIDATION_MODE_ASSOCIATE,
        True,
        "t2",
    )
    assert (every.mode, every.dry_run) == (admin_pb2.CONSOLIDATION_MODE_ALL, False)
    assert isinstance(status, admin_pb2.ConsolidationStatusRequest)
    with pytest.raises(SystemExit):  # argparse: not a pass
        main(["--addr", addr, "consolidate", "sleep"])


def test_dead_letters_lists_every_page_and_replays_all_or_some(
    admin: tuple[str, Admin], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake = admin
    assert main(["--addr", addr, "dead-letters", "list", "--page-size", "10", "--after", "3"]) == 0
    out = capsys.readouterr().out
    assert '"reason": "tags: more than 64"' in out
    assert [r.after for r in fake.seen] == [3, 4]  # paged on until a page says it is the last
    del fake.seen[1:]
    assert main(["--addr", addr, "dead-letters", "replay"]) == 0
    assert (
        main(["--addr", addr, "dead-letters", "replay", "--sequence", "4", "--sequence", "7"]) == 0
    )
    assert '"replayed": 2' in capsys.readouterr().out
    page, every, some = fake.seen
    assert (page.page_size, page.after, page.tenant) == (10, 3, "")
    assert list(every.sequences) == []
    assert list(some.sequences) == [4, 7]
    assert main(["--addr", addr, "dead-letters", "replay", "--tenant", "globex"]) == 1
    assert capsys.readouterr().err.startswith("PERMISSION_DENIED: ")
    with pytest.raises(SystemExit):  # argparse: list or replay
        main(["--addr", addr, "dead-letters"])


class Scripted(Admin):
    """An all-passes run: decay waits its turn, runs, succeeds; associate fails at once.
    Each status call moves the script on one step (the last one stays)."""

    def __init__(self) -> None:
        super().__init__()
        decay = admin_pb2.CONSOLIDATION_MODE_DECAY
        associate = admin_pb2.CONSOLIDATION_MODE_ASSOCIATE
        failed = admin_pb2.PassRun(
            run_id="r1", state=admin_pb2.PASS_STATE_FAILED, duration_s=0.5, error="vector down"
        )
        older = admin_pb2.PassRun(run_id="r0", state=admin_pb2.PASS_STATE_RUNNING, done=5)
        running = admin_pb2.PassRun(
            run_id="r1", state=admin_pb2.PASS_STATE_RUNNING, phase="scan", done=64, total=128
        )
        done = admin_pb2.PassRun(
            run_id="r1",
            state=admin_pb2.PASS_STATE_SUCCEEDED,
            duration_s=3.25,
            changes=[admin_pb2.ConsolidationChange(kind="relevance", count=90)],
        )
        self.script = [
            [(decay, older), (associate, failed)],  # another run still going: r1 pending
            [(decay, running), (associate, failed)],
            [(decay, running), (associate, failed)],  # no progress: no new line
            [(decay, done), (associate, failed)],
        ]

    def Consolidate(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        passes = [admin_pb2.CONSOLIDATION_MODE_DECAY, admin_pb2.CONSOLIDATION_MODE_ASSOCIATE]
        return admin_pb2.ConsolidateResponse(run_id="r1", passes=passes)

    def ConsolidationStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return admin_pb2.ConsolidationStatusResponse(
            tenant="acme",
            passes=[admin_pb2.PassStatus(mode=m, last_run=r) for m, r in step],
        )


def test_consolidate_wait_follows_the_run_until_every_pass_has_finished(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for addr, fake in _serving(Scripted(), admin_pb2_grpc.add_AdminServiceServicer_to_server):
        code = main(["--addr", addr, "consolidate", "all", "--wait", "--poll", "0.01"])
        out, err = capsys.readouterr()
        assert code == 1  # associate failed
        assert err.splitlines() == [
            "decay: pending",
            "associate: failed in 0.5s (no change): vector down",
            "decay: running, scan 64/128 (0s)",
            "decay: succeeded in 3.2s (relevance 90)",
        ]
        assert '"runId": "r1"' in out
        assert '"r0"' not in out
        assert len(fake.seen) == 5  # the request, then four looks
    with pytest.raises(SystemExit):
        main(["consolidate", "decay", "--dry-run", "--wait"])


@pytest.fixture
def gateway() -> Iterator[tuple[str, Gateway]]:
    yield from _serving(Gateway(), gateway_pb2_grpc.add_MemoryServiceServicer_to_server)


def test_recall_flags_and_request_json_make_one_request(
    gateway: tuple[str, Gateway], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake = gateway
    more = '{"expansion": {"relations": true}, "stateMode": "STATE_MODE_ALL", "limit": 9}'
    flags = {
        "--limit": "3",
        "--tag-mode": "all",
        "--exclude-tag": "draft",
        "--type": "Decision",
        "--mode": "hybrid_graph",
        "--time": "last 7 days",
        "--token-budget": "200",
        "--profile": "conversation",
        "--request": more,
    }
    tags = ["--tag", "project:atlas", "--tag", "team:db"]
    argv = ["--addr", addr, "recall", "which database?", *tags, "--rerank"]
    code = main([*argv, *(part for pair in flags.items() for part in pair)])
    assert code == 0
    [sent] = fake.seen
    assert (sent.query, sent.limit) == ("which database?", 3)  # a flag wins over --request
    assert list(sent.tags) == ["project:atlas", "team:db"]
    assert sent.tag_mode == common_pb2.TAG_MODE_ALL
    assert (list(sent.exclude_tags), list(sent.types)) == (["draft"], ["Decision"])
    assert sent.mode == gateway_pb2.RECALL_MODE_HYBRID_GRAPH
    assert (sent.time_query, sent.token_budget) == ("last 7 days", 200)
    assert sent.profile == "conversation"
    assert sent.HasField("rerank")
    assert sent.rerank
    assert sent.expansion.relations
    assert sent.state_mode == common_pb2.STATE_MODE_ALL
    assert '"content": "Sarah prefers Postgres"' in capsys.readouterr().out


def test_output_piped_into_a_reader_that_stops_early_is_no_error(
    gateway: tuple[str, Gateway],
) -> None:
    addr, _ = gateway
    cli = [sys.executable, "-m", "engram_clients.cli", "--addr", addr, "recall", "everything"]
    proc = subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert proc.stdout.read(10)  # like `| head -c 10`: read a little, then go away
    proc.stdout.close()
    assert proc.wait(timeout=30) == 0
    assert b"Traceback" not in proc.stderr.read()


def test_recall_leaves_unset_what_no_flag_sets(gateway: tuple[str, Gateway]) -> None:
    addr, fake = gateway
    assert main(["--addr", addr, "recall", "q"]) == 0
    [sent] = fake.seen
    assert sent.mode == gateway_pb2.RECALL_MODE_UNSPECIFIED
    assert not sent.HasField("rerank")  # the server's setting decides
    assert (sent.limit, sent.time_query, sent.token_budget) == (5, "", 0)
    assert sent.profile == ""  # the tenant's or the gateway's


def test_request_json_sets_the_limit_when_no_flag_does(gateway: tuple[str, Gateway]) -> None:
    addr, fake = gateway
    assert main(["--addr", addr, "recall", "q", "--request", '{"limit": 9}']) == 0
    assert main(["--addr", addr, "recall", "q", "--request", '{"limit": -1}']) == 0
    assert [sent.limit for sent in fake.seen] == [9, -1]  # -1 is the server's to refuse


def test_recall_reports_the_servers_status(
    gateway: tuple[str, Gateway], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, _ = gateway
    assert main(["--addr", addr, "recall", "q", "--time", "someday"]) == 1
    assert "INVALID_ARGUMENT: time_query" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("request_json", "says"),
    [
        ('{"limit": ', "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"nope": 1}', 'has no field named "nope"'),
        ('{"mode": "RECALL_MODE_SIDEWAYS"}', "RECALL_MODE_SIDEWAYS"),
    ],
)
def test_a_bad_request_json_is_a_usage_error_naming_the_flag(
    gateway: tuple[str, Gateway],
    capsys: pytest.CaptureFixture[str],
    request_json: str,
    says: str,
) -> None:
    addr, fake = gateway
    with pytest.raises(SystemExit) as exit_:
        main(["--addr", addr, "recall", "q", "--request", request_json])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--request" in err
    assert says in err
    assert fake.seen == []  # nothing was sent


def test_store_flags_and_memory_json_make_one_memory(
    gateway: tuple[str, Gateway], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake = gateway
    more = '{"metadata": {"ticket": "OPS-12"}, "timestamp": "2024-05-08T13:56:00Z", "type": "Fact"}'
    argv = ["--addr", addr, "store", "Billing moved to Postgres 16", "--tag", "project:atlas"]
    assert main([*argv, "--type", "Decision", "--importance", "0.8", "--memory", more]) == 0
    [sent] = fake.seen
    memory = sent.memory
    assert (memory.content, list(memory.tags)) == (
        "Billing moved to Postgres 16",
        ["project:atlas"],
    )
    assert memory.type == "Decision"  # the flag wins over --memory
    assert memory.importance == pytest.approx(0.8)
    assert dict(memory.metadata) == {"ticket": "OPS-12"}
    assert memory.timestamp.ToJsonString() == "2024-05-08T13:56:00Z"
    assert '"sequence": "7"' in capsys.readouterr().out


def test_store_leaves_type_and_importance_to_the_server(gateway: tuple[str, Gateway]) -> None:
    addr, fake = gateway
    assert main(["--addr", addr, "store", "x", "--memory", '{"type": "Fact"}']) == 0
    [sent] = fake.seen
    assert sent.memory.type == "Fact"
    assert not sent.memory.HasField("importance")


def test_a_bad_memory_json_is_a_usage_error_naming_the_flag(
    gateway: tuple[str, Gateway], capsys: pytest.CaptureFixture[str]
) -> None:
    addr, fake = gateway
    with pytest.raises(SystemExit) as exit_:
        main(["--addr", addr, "store", "x", "--memory", '{"timestamp": "yesterday"}'])
    assert exit_.value.code == 2
    assert "--memory" in capsys.readouterr().err
    assert fake.seen == []


def test_store_takes_the_content_from_memory_json(gateway: tuple[str, Gateway]) -> None:
    addr, fake = gateway
    assert main(["--addr", addr, "store", "--memory", '{"content": "Tom picked Redis"}']) == 0
    [sent] = fake.seen
    assert sent.memory.content == "Tom picked Redis"


@pytest.mark.parametrize("memory_json", ["{}", '{"content": ""}'])
def test_store_without_content_is_a_usage_error_naming_it(
    gateway: tuple[str, Gateway], capsys: pytest.CaptureFixture[str], memory_json: str
) -> None:
    addr, fake = gateway
    with pytest.raises(SystemExit) as exit_:
        main(["--addr", addr, "store", "--memory", memory_json])
    assert exit_.value.code == 2
    assert "content" in capsys.readouterr().err
    assert fake.seen == []
