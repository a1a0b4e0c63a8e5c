"""Table tests of the GPU ledger: a GPU is never held twice."""

from __future__ import annotations

import re

import pytest

from scalelab.spawner.ledger import GPULedger, Holding, LedgerError

GPUS = ["GPU-a", "GPU-b", "GPU-c"]


def test_two_servers_asking_for_one_gpu_get_different_gpus():
    ledger = GPULedger(GPUS)
    a = ledger.allocate("alice/", "alice", 1, now=10.0)
    b = ledger.allocate("bob/", "bob", 1, now=11.0)
    assert a.gpus == ("GPU-a",) and b.gpus == ("GPU-b",)
    assert ledger.free() == ["GPU-c"]
    assert ledger.holder("GPU-b") == "bob/"


@pytest.mark.parametrize(
    ("setup", "request_", "message"),
    [
        ([], ("alice/", 4), "4 GPU(s) asked for, 3 free"),
        ([("alice/", 1)], ("alice/", 1), "already holds"),
        ([], ("alice/", -1), "cannot allocate -1"),
        ([("bob/", 2)], ("alice/", 2), "2 GPU(s) asked for, 1 free"),
    ],
)
def test_refused_allocations_change_nothing(setup, request_, message):
    ledger = GPULedger(GPUS)
    for server, count in setup:
        ledger.allocate(server, server[:-1], count, now=0.0)
    before = (ledger.free(), ledger.holdings())
    with pytest.raises(LedgerError, match=re.escape(message)):
        ledger.allocate(request_[0], request_[0][:-1], request_[1], now=1.0)
    assert (ledger.free(), ledger.holdings()) == before


def test_zero_gpus_is_a_cpu_server_and_holds_nothing():
    ledger = GPULedger(GPUS)
    assert ledger.allocate("alice/", "alice", 0, now=0.0).gpus == ()
    assert ledger.holding("alice/") is None
    assert ledger.free() == GPUS


def test_release_returns_the_gpus_and_user_totals_follow():
    ledger = GPULedger(GPUS)
    ledger.allocate("alice/", "alice", 1, now=0.0)
    ledger.allocate("alice/big", "alice", 2, now=0.0)
    assert ledger.held_by_user("alice") == 3
    assert ledger.release("alice/big") == ("GPU-b", "GPU-c")
    assert ledger.release("alice/big") == ()
    assert ledger.held_by_user("alice") == 1
    assert ledger.free() == ["GPU-b", "GPU-c"]


def test_quarantined_gpu_is_not_allocated_until_cleared():
    ledger = GPULedger(GPUS)
    ledger.quarantine("GPU-a", "pid 42 still holds 1200 MiB")
    assert ledger.allocate("bob/", "bob", 1, now=0.0).gpus == ("GPU-b",)
    assert ledger.quarantined() == {"GPU-a": "pid 42 still holds 1200 MiB"}
    with pytest.raises(LedgerError, match="held by bob/"):
        ledger.quarantine("GPU-b", "x")
    ledger.clear(["GPU-a"])
    assert ledger.free() == ["GPU-a", "GPU-c"]


def test_restore_after_restart_keeps_holdings_and_refuses_double_grants():
    ledger = GPULedger(GPUS)
    ledger.restore(Holding("alice/", "alice", ("GPU-b",), since=5.0))
    assert ledger.allocate("bob/", "bob", 1, now=6.0).gpus == ("GPU-a",)
    with pytest.raises(LedgerError, match="GPU GPU-b of server carol/ is held by alice/"):
        ledger.restore(Holding("carol/", "carol", ("GPU-b",), since=1.0))
    with pytest.raises(LedgerError, match="not in the inventory"):
        ledger.restore(Holding("dave/", "dave", ("GPU-z",), since=1.0))
    ledger.restore(Holding("alice/", "alice", ("GPU-b",), since=5.0))  # idempotent
    assert ledger.holder("GPU-b") == "alice/"


def test_duplicate_inventory_is_refused():
    with pytest.raises(LedgerError, match="names a GPU twice"):
        GPULedger(["GPU-a", "GPU-a"])


def test_a_schedulers_record_takes_a_gpu_from_a_server_whose_job_ended_unseen():
    """Slurm started s5's job on GPU-a after s1's job was cancelled outside the hub, before the
    hub's poll of s1: Slurm's record wins, and s1's later release cannot free s5's GPU."""
    ledger = GPULedger(GPUS)
    ledger.allocate("s1/", "s1", 2, now=1.0)  # GPU-a, GPU-b
    ledger.allocate("s2/", "s2", 1, now=2.0)  # GPU-c
    taken = ledger.take_over(Holding("s5/", "s5", ("GPU-a",), 3.0))
    assert taken == {"s1/": ("GPU-a",)}
    assert ledger.holder("GPU-a") == "s5/"
    assert ledger.holding("s1/").gpus == ("GPU-b",)  # its other GPU it may still hold
    assert ledger.held_by_user("s1") == 1 and ledger.held_by_user("s5") == 1
    assert ledger.release("s1/") == ("GPU-b",)  # s1's poll found its job gone
    assert ledger.holder("GPU-a") == "s5/" and ledger.free() == ["GPU-b"]
    # the whole of a server's GPUs taken: the server is dropped; a quarantined GPU is cleared
    ledger.quarantine("GPU-b", "memory in use")
    assert ledger.take_over(Holding("s6/", "s6", ("GPU-b", "GPU-c"), 4.0)) == {"s2/": ("GPU-c",)}
    assert ledger.holding("s2/") is None and ledger.quarantined() == {}
    assert [(h.server, h.gpus) for h in ledger.holdings()] == [
        ("s5/", ("GPU-a",)),
        ("s6/", ("GPU-b", "GPU-c")),
    ]
    # the same record again changes nothing; an unknown GPU is refused, nothing changes
    assert ledger.take_over(Holding("s6/", "s6", ("GPU-b", "GPU-c"), 4.0)) == {}
    with pytest.raises(LedgerError, match=r"not in the inventory: \['GPU-z'\]"):
        ledger.take_over(Holding("s7/", "s7", ("GPU-a", "GPU-z"), 5.0))
    assert ledger.holder("GPU-a") == "s5/"
