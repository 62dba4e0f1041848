"""The replication core, rule by rule, with an in-memory log and a hand-driven clock."""

from __future__ import annotations

import pytest

from raftlog.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    RequestTimedOutError,
    StaleBrokerEpochError,
    UnknownLeaderEpochError,
)
from raftlog.replication.core import (
    UNDEFINED_EPOCH,
    Append,
    AssignEpoch,
    CompleteProduce,
    FollowerFetch,
    HighWatermarkChanged,
    PartitionConfig,
    PartitionCore,
    ProposeIsr,
    ReplicationInvariantError,
    Role,
    Truncate,
    TruncateFully,
    perform_on_log,
)
from tests.sim.model import SimLog

LAG_MS = 1000


def leader(
    isr: tuple[int, ...] = (1, 2, 3), min_isr: int = 2, records: int = 0, fsync: bool = False
) -> tuple[PartitionCore, SimLog, list]:
    log = SimLog()
    core = PartitionCore(1, "t-0", log)
    config = PartitionConfig(
        min_insync_replicas=min_isr, replica_lag_time_max_ms=LAG_MS, fsync_policy=fsync
    )
    actions = core.become_leader(5, 0, (1, 2, 3), isr, {2: 10, 3: 11}, config, now_ms=0)
    for a in actions:
        if isinstance(a, AssignEpoch):
            perform_on_log(core, log, a, 0)
    for _ in range(records):
        log.append_leader((0,), 5)
    return core, log, actions


def fetch(core: PartitionCore, replica: int, offset: int, now: int, epoch: int = 5) -> list:
    spec = FollowerFetch(offset, 5 if offset else UNDEFINED_EPOCH, epoch, offset)
    answer, actions = core.on_follower_fetch(replica, 10 + replica - 2, spec, now)
    assert answer.error is None and answer.diverging is None, answer
    return actions


def completions(actions: list) -> dict:
    return {a.token: a.error for a in actions if isinstance(a, CompleteProduce)}


def test_become_leader_assigns_its_epoch_at_the_log_end() -> None:
    _, log, actions = leader()
    assert AssignEpoch(5, 0) in actions
    assert log.latest_epoch == 5


def test_high_watermark_is_the_minimum_over_the_isr_and_never_moves_back() -> None:
    core, _log, _ = leader(records=10)
    assert core.high_watermark == 0  # followers unknown: nothing is committed yet
    fetch(core, 2, 10, now=1)
    assert core.high_watermark == 0  # 3 is in the ISR and has not fetched
    actions = fetch(core, 3, 4, now=2)
    assert core.high_watermark == 4 and HighWatermarkChanged(4) in actions
    fetch(core, 3, 10, now=3)
    assert core.high_watermark == 10
    fetch(core, 3, 10, now=4)
    assert core.high_watermark == 10


def test_strict_min_isr_stops_the_high_watermark_and_refuses_acks_all() -> None:
    core, _log, _ = leader(isr=(1,), min_isr=2, records=3)
    assert core.on_leader_append(1) == []
    assert core.high_watermark == 0
    assert isinstance(core.check_produce(-1), NotEnoughReplicasError)
    assert core.check_produce(1) is None  # acks=1 is still taken


def test_single_replica_commits_at_once() -> None:
    core, log, _ = leader(isr=(1,), min_isr=1)
    log.append_leader((1, 2), 5)
    assert HighWatermarkChanged(2) in core.on_leader_append(1)
    assert completions(core.wait_for_commit(1, 100, "a", 1)) == {"a": None}


def test_acks_all_waits_for_the_isr_then_completes_in_order() -> None:
    core, log, _ = leader(records=2)
    assert core.wait_for_commit(0, 500, "a", 1) == []
    log.append_leader((0,), 5)
    assert core.wait_for_commit(2, 500, "b", 1) == []
    fetch(core, 2, 3, now=2)
    assert completions(fetch(core, 3, 1, now=3)) == {"a": None}
    assert completions(fetch(core, 3, 3, now=4)) == {"b": None}


def test_a_leader_cut_off_from_the_quorum_fails_its_waiters_and_keeps_its_records() -> None:
    core, log, _ = leader(records=2)
    core.wait_for_commit(0, 5000, "a", 1)
    core.wait_for_commit(1, 5000, "b", 1)
    done = completions(core.cut_off())
    assert set(done) == {"a", "b"}
    assert all(isinstance(e, NotLeaderOrFollowerError) for e in done.values())
    assert core.role is Role.LEADER and log.log_end_offset == 2 and core.cut_off() == []
    # A follower has nothing to fail.
    core.become_follower(2, 6, 1, (1, 2, 3))
    assert core.cut_off() == []


def test_acks_all_fails_when_the_isr_falls_below_the_minimum() -> None:
    core, _log, _ = leader(records=1)
    core.wait_for_commit(0, 500, "a", 1)
    done = completions(core.update_isr((1,), 1, {}, now_ms=2))
    assert isinstance(done["a"], NotEnoughReplicasAfterAppendError)


def test_acks_all_times_out_and_fails_when_leadership_is_lost() -> None:
    core, _log, _ = leader(records=2)
    core.wait_for_commit(0, 100, "a", 1)
    core.wait_for_commit(1, 900, "b", 1)
    assert isinstance(completions(core.tick(100))["a"], RequestTimedOutError)
    done = completions(core.become_follower(2, 6, 1, (1, 2, 3)))
    assert isinstance(done["b"], NotLeaderOrFollowerError)
    assert core.role is Role.FOLLOWER


def test_lagging_follower_leaves_the_isr_after_the_lag_time() -> None:
    core, _log, _ = leader(records=5)
    fetch(core, 2, 5, now=10)
    fetch(core, 3, 2, now=10)
    assert core.tick(LAG_MS) == []  # 3 caught up at become-leader time (0): not yet
    actions = core.tick(LAG_MS + 1)
    assert ProposeIsr((1, 2), 5, 0, ()) in actions
    assert core.tick(LAG_MS + 2) == []  # one proposal in flight at a time
    # While the shrink is pending, 3 still holds the high watermark back (maximal ISR).
    assert core.high_watermark == 2
    core.update_isr((1, 2), 1, {}, now_ms=LAG_MS + 3)
    assert core.high_watermark == 5


def test_caught_up_time_follows_kafkas_definition() -> None:
    """A follower that keeps fetching up to where the leader was at its previous fetch stays
    caught up, even though the leader keeps growing."""
    core, log, _ = leader(records=1)
    fetch(core, 2, 1, now=0)
    fetch(core, 3, 1, now=0)
    for t in range(1, 6):
        end = log.log_end_offset
        log.append_leader((0,), 5)  # the leader moves on before each fetch
        fetch(core, 2, end, now=t * 600)
        fetch(core, 3, 0 if t > 1 else end, now=t * 600)  # 3 stopped progressing
    assert core.out_of_sync_replicas(3000) == [3]


def test_isr_expansion_needs_the_high_watermark_and_the_epoch_start() -> None:
    core, log, _ = leader(isr=(1, 2), min_isr=1, records=0)
    log.append_leader((0,) * 4, 5)
    fetch(core, 2, 4, now=1)
    assert core.high_watermark == 4
    assert fetch(core, 3, 3, now=2) == []  # below the high watermark
    actions = fetch(core, 3, 4, now=3)
    assert ProposeIsr((1, 2, 3), 5, 0, ((3, 11),)) in actions


def test_expansion_waits_for_the_leaders_epoch_start_kafka_7128() -> None:
    log = SimLog()
    for _ in range(8):
        log.append_leader((0,), 4)
    core = PartitionCore(1, "t-0", log, high_watermark=3)
    config = PartitionConfig(min_insync_replicas=1, replica_lag_time_max_ms=LAG_MS)
    core.become_leader(5, 0, (1, 2), (1,), {}, config, now_ms=0)
    spec = FollowerFetch(3, 4, 5, 3)
    answer, actions = core.on_follower_fetch(2, 0, spec, 1)
    # At the HW (3) but below the start of epoch 5 (8): not yet in sync.
    assert answer.error is None and not any(isinstance(a, ProposeIsr) for a in actions)


def test_fetch_epochs_are_fenced_both_ways() -> None:
    core, _, _ = leader()
    old = FollowerFetch(0, UNDEFINED_EPOCH, 4, 0)
    new = FollowerFetch(0, UNDEFINED_EPOCH, 6, 0)
    assert isinstance(core.on_follower_fetch(2, 10, old, 1)[0].error, FencedLeaderEpochError)
    assert isinstance(core.on_follower_fetch(2, 10, new, 1)[0].error, UnknownLeaderEpochError)
    assert isinstance(core.on_consumer_fetch(4).error, FencedLeaderEpochError)
    assert core.on_consumer_fetch(-1).error is None


def test_fetch_from_an_older_broker_incarnation_is_refused() -> None:
    core, _, _ = leader()
    spec = FollowerFetch(0, UNDEFINED_EPOCH, 5, 0)
    assert isinstance(core.on_follower_fetch(2, 9, spec, 1)[0].error, StaleBrokerEpochError)


def test_divergence_is_answered_with_the_epoch_end() -> None:
    log = SimLog()
    log.append_leader((1, 2, 3), 3)
    core = PartitionCore(1, "t-0", log)
    config = PartitionConfig(min_insync_replicas=1, replica_lag_time_max_ms=LAG_MS)
    for a in core.become_leader(5, 0, (1, 2), (1, 2), {}, config, 0):
        if isinstance(a, AssignEpoch):
            perform_on_log(core, log, a, 0)
    # The follower wrote offsets 3..5 in epoch 4, which never reached this leader.
    answer, actions = core.on_follower_fetch(2, 0, FollowerFetch(6, 4, 5, 6), 1)
    assert answer.diverging == (3, 3) and actions == []


def follower_log() -> SimLog:
    log = SimLog()
    log.append_leader((1, 2, 3), 3)
    log.append_leader((4, 5, 6), 4)
    return log


def test_follower_truncates_to_the_end_of_the_common_epoch() -> None:
    log = follower_log()
    core = PartitionCore(2, "t-0", log, high_watermark=3)
    core.become_follower(1, 5, 0, (1, 2))
    spec = core.fetch_spec()
    assert spec.fetch_offset == 6 and spec.last_fetched_epoch == 4
    assert core.on_fetch_response(spec, None, (3, 3), 3, 0, None) == [Truncate(3)]
    log.truncate_to(3)
    core.after_truncation(2)
    assert core.fetch_spec().last_fetched_epoch == 3


def test_follower_without_the_leaders_epoch_truncates_in_rounds() -> None:
    log = follower_log()  # epochs 3 (0..2) and 4 (3..5)
    core = PartitionCore(2, "t-0", log, high_watermark=3)
    core.become_follower(1, 5, 0, (1, 2))
    # The leader's epoch 2 ends at 5: we have no epoch 2, our older epoch ends at... nothing.
    actions = core.on_fetch_response(core.fetch_spec(), None, (2, 5), 3, 0, None)
    assert actions == [Truncate(0)]


def test_follower_out_of_range_restarts_at_the_leaders_log_start() -> None:
    log = follower_log()
    core = PartitionCore(2, "t-0", log)
    core.become_follower(1, 5, 0, (1, 2))
    spec = core.fetch_spec()
    assert core.on_fetch_response(spec, None, None, 0, 100, None, out_of_range=True) == [
        TruncateFully(100)
    ]


def test_follower_appends_and_adopts_the_leaders_high_watermark_clamped() -> None:
    log = SimLog()
    core = PartitionCore(2, "t-0", log)
    core.become_follower(1, 5, 0, (1, 2))
    spec = core.fetch_spec()
    data = [object()]
    assert core.on_fetch_response(spec, None, None, 50, 0, data) == [Append(data)]
    log.append_as_follower([])  # nothing really appended: the HW stays within the log
    core.after_follower_write(1)
    assert core.high_watermark == 0
    log.append_leader((1, 2, 3), 5)
    core.on_fetch_response(core.fetch_spec(), None, None, 2, 0, None)
    core.after_follower_write(2)
    assert core.high_watermark == 2


def test_stale_fetch_answers_are_dropped() -> None:
    log = SimLog()
    core = PartitionCore(2, "t-0", log)
    core.become_follower(1, 5, 0, (1, 2))
    spec = core.fetch_spec()
    core.become_follower(3, 6, 1, (1, 2, 3))
    assert core.on_fetch_response(spec, None, None, 9, 0, [1]) == []


def test_fsync_policy_counts_only_what_is_durable() -> None:
    core, _log, _ = leader(isr=(1, 2), min_isr=2, records=4, fsync=True)
    spec = FollowerFetch(4, 5, 5, 2)  # follower has 4, fsynced 2
    core.on_follower_fetch(2, 10, spec, 1)
    assert core.high_watermark == 0  # the leader itself has fsynced nothing
    core.on_durable(4, 2)
    assert core.high_watermark == 2


def test_invariants_hold_under_python_dash_o() -> None:
    core, _log, _ = leader(records=1)
    core.isr = (2, 3)  # a bug: the leader left its own ISR
    with pytest.raises(ReplicationInvariantError):
        core.tick(1)


def test_an_unanswered_isr_expansion_is_resent_and_still_counts() -> None:
    """Seed 688 of the simulation: an expansion the quorum applied, whose answer was lost.
    Forgetting it would let the leader commit alone while elections count the follower."""
    core, log, _ = leader(isr=(1,), min_isr=1, records=0)
    log.append_leader((0,) * 4, 5)
    core.on_leader_append(1)
    assert core.high_watermark == 4
    actions = fetch(core, 2, 4, now=2)
    proposal = next(a for a in actions if isinstance(a, ProposeIsr))
    assert proposal.isr == (1, 2)
    log.append_leader((0,), 5)
    core.on_leader_append(3)
    assert core.high_watermark == 4  # 2 counts while the expansion is pending
    again = core.tick(5_000 + 3)  # the proposal timed out: sent again, still pending
    assert proposal in again
    log.append_leader((0,), 5)
    core.on_leader_append(5_004)
    assert core.high_watermark == 4
    # A stale-version refusal proves nothing: still pending.
    core.on_isr_proposal_refused(proposal, definitive=False)
    assert core.pending_isr == (1, 2)
    # A definitive refusal (e.g. broker 2 was fenced meanwhile) drops it.
    core.on_isr_proposal_refused(proposal, definitive=True)
    assert core.pending_isr is None
    core.on_leader_append(5_005)
    assert core.high_watermark == 6


def test_an_idle_leader_needs_no_tick_until_something_happens() -> None:
    """The replica manager ticks only leaders that need it (thousands of idle partitions
    would otherwise cost a third of a core): the rule must see every reason to tick."""
    core, log, _ = leader(records=0)
    assert core.needs_tick  # the followers' positions are unknown at a new leadership
    fetch(core, 2, 0, now=1)
    fetch(core, 3, 0, now=1)
    assert not core.needs_tick
    log.append_leader((0,), 5)
    core.on_leader_append(2)
    assert core.needs_tick  # uncommitted records: the ISR may have to shrink
    fetch(core, 2, 1, now=3)
    fetch(core, 3, 1, now=3)
    assert not core.needs_tick
    core.wait_for_commit(0, 100, "a", 4)
    assert not core.needs_tick  # committed at once: nothing waits
    log.append_leader((0,), 5)
    core.wait_for_commit(1, 100, "b", 5)
    assert core.needs_tick  # a produce waits (its deadline)
    follower = core.followers[3]
    assert core.follower_known(3) and follower.log_end_offset == 1


def test_an_idle_follower_in_a_fetch_session_stays_caught_up_when_the_leader_appends() -> None:
    """A fetch session leaves idle partitions out of its requests, so the leader records no
    fetch of them for as long as they are idle. When the leader appends after a long quiet
    spell, the follower must count as caught up as of its session's last request (it was at
    the log end then), not as of its last recorded fetch: else it would leave the ISR at once."""
    core, log, _ = leader(records=1)
    fetch(core, 2, 1, now=0)
    fetch(core, 3, 1, now=0)
    quiet = 10 * LAG_MS
    log.append_leader((0,), 5)
    # Without the session's word, 2 looks lagging since time 0:
    assert core.out_of_sync_replicas(quiet + 1) == [2, 3]
    core.on_follower_idle(2, 1, at_ms=quiet)  # 2's session asked at `quiet`, at the log end
    core.on_follower_idle(3, 0, at_ms=quiet)  # a stale offset proves nothing: ignored
    assert core.out_of_sync_replicas(quiet + 1) == [3]
    # Its next fetch, at the new end, is caught up as always.
    fetch(core, 2, 2, now=quiet + 5)
    assert core.out_of_sync_replicas(quiet + LAG_MS) == [3]


def test_perform_on_log_applies_the_log_actions_and_refuses_the_rest() -> None:
    """The one function the broker's ReplicaManager and the simulation both perform log
    actions with."""
    from raftlog.replication.core import ReplicationInvariantError

    core, log, _ = leader(records=3)
    with pytest.raises(ReplicationInvariantError, match="assigned at 1, but the log ends at 3"):
        perform_on_log(core, log, AssignEpoch(6, 1), 0)
    perform_on_log(core, log, AssignEpoch(6, 3), 0)
    assert log.latest_epoch == 6
    perform_on_log(core, log, Truncate(1), 0)
    assert log.log_end_offset == 1 and core.high_watermark <= 1
    with pytest.raises(ReplicationInvariantError, match="not a log action"):
        perform_on_log(core, log, HighWatermarkChanged(0), 0)


def test_a_new_leader_answers_no_end_offset_until_its_followers_confirm_its_epoch_start() -> None:
    """KIP-207: a replica that takes over holds the high watermark it had as a follower, older
    than its predecessor's; ListOffsets must not see the end go back meanwhile."""
    log = SimLog()
    for _ in range(10):
        log.append_leader((0,), 4)  # written under the previous leader, epoch 4
    core = PartitionCore(1, "t-0", log)
    config = PartitionConfig(min_insync_replicas=2, replica_lag_time_max_ms=LAG_MS)
    for a in core.become_leader(5, 0, (1, 2, 3), (1, 2, 3), {2: 10, 3: 11}, config, now_ms=0):
        if isinstance(a, AssignEpoch):
            perform_on_log(core, log, a, 0)
    assert core.high_watermark == 0 and core.epoch_start_offset == 10
    with pytest.raises(OffsetNotAvailableError, match="below the epoch's start 10"):
        core.known_high_watermark()
    fetch(core, 2, 10, now=1)
    fetch(core, 3, 10, now=1)
    assert core.known_high_watermark() == 10


def test_a_reassignment_at_the_same_leader_epoch_updates_the_leaders_followers() -> None:
    """A joining replica is a follower of the leader from the metadata change on (its fetches
    are served and can bring it into the ISR); a leaving one no longer holds the high
    watermark back."""
    core, log, _ = leader(isr=(1, 2, 3), records=10)
    fetch(core, 2, 10, now=1)
    fetch(core, 3, 10, now=1)
    assert core.high_watermark == 10
    core.update_isr((1, 2, 3), 1, {2: 10, 3: 11, 4: 12}, now_ms=2, replicas=(4, 1, 2, 3))
    assert sorted(core.followers) == [2, 3, 4]
    actions = fetch(core, 4, 10, now=3)  # caught up: the leader proposes it for the ISR
    assert any(isinstance(a, ProposeIsr) and 4 in a.isr for a in actions), actions
    core.update_isr((1, 2, 3, 4), 2, {2: 10, 3: 11, 4: 12}, now_ms=4)
    # Complete: 2 and 3 leave; 4 and the leader remain.
    core.update_isr((1, 4), 3, {4: 12}, now_ms=5, replicas=(4, 1))
    assert sorted(core.followers) == [4]
    log.append_leader((0,), 5)
    fetch(core, 4, 11, now=6)
    assert core.high_watermark == 11  # 2 and 3, gone, do not hold it at 10
