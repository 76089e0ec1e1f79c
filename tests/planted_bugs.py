"""The bugs issue 38 found passing the tests named for their behaviour, planted one at a time:
each is put into the source, the tests now there for it are run, and the source is put back.
A bug is CAUGHT when one of its tests fails; the first assertion line is printed.

Run: ``.venv/bin/python -m tests.planted_bugs [index ...]`` (``make planted-bugs``). It edits the
working tree while it runs (each file is restored, also on Ctrl-C), so run nothing else meanwhile.
docs/testing.md has the last run's output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent


class Bug(NamedTuple):
    name: str
    path: str  # under aiorocketmq/
    correct: str  # the source as it is (must occur once)
    planted: str  # the bug
    tests: list[str]


BUGS: list[Bug] = [
    Bug(
        "SYNC_MASTER acks the message start",
        "broker/store/store.py",
        "replicated = await replica.wait(result.wrote_offset + result.wrote_bytes)",
        "replicated = await replica.wait(result.wrote_offset)",
        [
            "tests/broker/ha/test_replication.py::test_a_sync_master_answers_no_send_before_its_slave_acknowledges_the_end"
        ],
    ),
    Bug(
        "SYNC_MASTER does not wait",
        "broker/store/store.py",
        "replicated = await replica.wait(result.wrote_offset + result.wrote_bytes)",
        "replicated = PutStatus.PUT_OK",
        [
            "tests/broker/ha/test_replication.py::test_a_sync_master_answers_no_send_before_its_slave_acknowledges_the_end"
        ],
    ),
    Bug(
        "HA master answers at the start offset",
        "broker/ha/master.py",
        "        if self.acked_offset >= end_offset:\n",
        "        if self.acked_offset >= end_offset - 1:\n",
        ["tests/broker/ha/test_master_offsets.py"],
    ),
    Bug(
        "ACL skips send-back and the remoting POP codes",
        "broker/server.py",
        "handlers = {code: guarded(self.access, handler) for code, handler in handlers.items()}",
        "handlers = {code: (handler if code in (36, 200050, 200051, 200053) else guarded(self.access, handler)) for code, handler in handlers.items()}",
        ["tests/security/test_acl.py::test_every_family_is_refused_and_nothing_is_stored"],
    ),
    Bug(
        "POP redelivers 300 ms early",
        "broker/pop/revive.py",
        "while deadlines and deadlines[0][0] <= now:",
        "while deadlines and deadlines[0][0] <= now + 300:",
        [
            "tests/broker/unit/test_pop.py::test_nothing_comes_back_before_its_invisible_time_ends",
            "tests/broker/unit/test_pop.py::test_the_revive_task_redelivers_at_the_invisible_time_not_before",
        ],
    ),
    Bug(
        "POP expiry redelivers acked messages of a partly acked batch",
        "broker/pop/revive.py",
        "        handled: list[int] = []\n        try:\n            for i in pending:",
        "        handled: list[int] = []\n        try:\n            for i in range(len(ck.offsets)):",
        [
            "tests/broker/unit/test_pop.py::test_a_partly_acknowledged_batch_redelivers_only_what_was_not_acknowledged"
        ],
    ),
    Bug(
        "producer retry goes back to the failed broker",
        "client/producer.py",
        "mq = info.select(last_broker, faults)",
        "mq = info.select(None, faults)",
        [
            "tests/client/test_failure_paths.py::test_a_retry_goes_to_another_broker_than_the_one_that_just_failed"
        ],
    ),
    Bug(
        "orderly consumer keeps its queue after a refused renewal",
        "client/rebalance.py",
        "                else:\n                    pq.locked = False",
        "                else:\n                    pass",
        [
            "tests/client/test_failure_paths.py::test_a_refused_lock_renewal_stops_orderly_consumption_of_that_queue"
        ],
    ),
    Bug(
        "consumer commits the largest offset consumed",
        "client/concurrent_dispatch.py",
        "offset = pq.remove(acked)",
        "offset = (pq.remove(acked), max(m.queue_offset for m in acked) + 1)[1]",
        ["tests/client/test_consumer_restart.py"],
    ),
    Bug(
        "broker commits a check-back ROLLBACK",
        "broker/transactions.py",
        "        if kind == TRANSACTION_COMMIT_TYPE:\n            props = dict(half.properties)",
        "        if kind in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):\n            props = dict(half.properties)",
        ["tests/broker/unit/test_transactions.py::test_check_back_answers_are_applied_as_given"],
    ),
    Bug(
        "producer answers a check-back ROLLBACK as COMMIT",
        "client/producer.py",
        "            commit_or_rollback=state.value,\n            from_transaction_check=True,",
        "            commit_or_rollback=8 if state.value == 12 else state.value,\n            from_transaction_check=True,",
        ["tests/client/test_failure_paths.py::test_a_check_back_is_answered_with_the_checkers_own_decision"],
    ),
    Bug(
        "a queue lock is held by any client of the same host",
        "broker/locks.py",
        "if holder is None or holder[0] == client_id or now - holder[1] > self.max_live:",
        "if holder is None or holder[0].split('@')[0] == client_id.split('@')[0] or now - holder[1] > self.max_live:",
        ["tests/broker/test_state.py::test_a_queue_lock_belongs_to_one_client_id_not_to_its_host"],
    ),
    Bug(
        "long polling not woken by arrivals",
        "broker/arrivals.py",
        "            self.pulls.on_arrival(topic, queue_id, max_offset, tags_code)\n",
        "            pass\n",
        ["tests/broker/test_broker.py::test_long_poll_wakes_on_arrival"],
    ),
    Bug(
        "route changes after the first not passed on",
        "client/client_instance.py",
        "        if old != route:\n",
        "        if old is None:\n",
        [
            "tests/client/test_failure_paths.py::test_every_route_change_reaches_the_members_not_only_the_first"
        ],
    ),
    Bug(
        "controller elects outside the SyncStateSet without enableElectUncleanMaster",
        "controller/replicas.py",
        "all_replicas = set(replicas.broker_id_info) if self.enable_elect_unclean_master else None",
        "all_replicas = set(replicas.broker_id_info)",
        ["tests/controller/test_controller_replicas.py::test_no_alive_replica_in_sync_state_set"],
    ),
    Bug(
        "controller takes a SyncStateSet change made under a stale epoch",
        "controller/replicas.py",
        "if sync_state_set.sync_state_set_epoch != info.sync_state_set_epoch:",
        "if sync_state_set.sync_state_set_epoch > info.sync_state_set_epoch:",
        ["tests/controller/test_controller_replicas.py::test_alter_sync_state_set_fencing"],
    ),
    Bug(
        "allAckInSyncStateSet acknowledges with one member missing",
        "broker/ha/autoswitch/master.py",
        "            return acks >= len(members)\n",
        "            return acks >= len(members) - 1\n",
        ["tests/broker/ha/test_autoswitch.py::test_a_send_waits_for_every_member_of_the_sync_state_set"],
    ),
    Bug(
        "a rejoining old master keeps what the new master never had",
        "broker/ha/autoswitch/epoch.py",
        "return min(entry.end, theirs.end)",
        "return max(entry.end, theirs.end)",
        [
            "tests/broker/ha/test_autoswitch_epoch.py::test_consistent_point",
            "tests/broker/ha/test_autoswitch.py::test_an_old_master_cuts_what_the_new_master_never_had",
        ],
    ),
    Bug(
        "controller mode shows messages the SyncStateSet does not have yet",
        "broker/store/dispatch.py",
        "        if not self.holding and confirmed >= end:\n",
        "        if not self.holding:\n",
        [
            "tests/broker/ha/test_autoswitch_visibility.py::test_a_message_is_visible_once_every_sync_state_set_member_has_it"
        ],
    ),
]


def plant(index: int, bug: Bug) -> bool:
    path = ROOT / "aiorocketmq" / bug.path
    text = path.read_text()
    if text.count(bug.correct) != 1:
        raise SystemExit(
            f"[{index}] {bug.name}: the source to plant into changed ({bug.path}); update this file"
        )
    path.write_text(text.replace(bug.correct, bug.planted))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *bug.tests],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    finally:
        path.write_text(text)
    lines = done.stdout.strip().splitlines()
    first = next((line.strip() for line in lines if line.startswith("E ")), "")
    print(f"[{index}] {bug.name}: {'CAUGHT' if done.returncode else 'MISSED'} ({lines[-1] if lines else ''})")
    if first:
        print(f"      {first[:300]}")
    return done.returncode != 0


def main(argv: list[str]) -> int:
    chosen = {int(a) for a in argv}
    missed = [i for i, bug in enumerate(BUGS) if (not chosen or i in chosen) and not plant(i, bug)]
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
