"""Coordinator-side partition assignors: Kafka's "uniform" and "range" (KIP-848), both sticky.

An assignor turns the group's members (their subscriptions and what each is assigned
now) and the subscribed topics' partition counts into a target assignment. Both keep a
member's current partitions wherever balance allows, so a rebalance moves as few
partitions as it can: a partition that moves must first be revoked by its owner, and
every move is a pause in that partition's consumption.

* uniform: every partition of every subscribed topic spread as evenly as possible over
  the members subscribed to its topic (member counts differ by at most one where the
  subscriptions allow it).
* range: per topic, each subscribed member gets a contiguous block of partition numbers
  on first assignment (the classic range shape, so co-partitioned topics land together),
  ``count // members`` each and one more for the first ``count % members``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from txlog.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows of a member: its subscription and its current target."""

    topics: frozenset[str]
    current: frozenset[TopicPartition]


Assignment = dict[str, set[TopicPartition]]
Assignor = Callable[[Mapping[str, MemberSpec], Mapping[str, int]], Assignment]


def uniform(members: Mapping[str, MemberSpec], partitions: Mapping[str, int]) -> Assignment:
    """Sticky, balanced over all subscribed partitions; heterogeneous subscriptions allowed."""
    out: Assignment = {m: set() for m in members}
    owner: dict[TopicPartition, str] = {}
    eligible = _eligible(members, partitions)
    quota = _fair_quota(members, eligible)
    # Keep what each member has, up to its fair share: stickiness within balance.
    for member in sorted(members):
        kept = sorted(tp for tp in members[member].current if member in eligible.get(tp, ()) and tp not in owner)
        for tp in kept[: quota[member]]:
            out[member].add(tp)
            owner[tp] = member
    for tp in sorted(eligible):
        if tp not in owner and eligible[tp]:
            target = min(eligible[tp], key=lambda m: (len(out[m]), m))
            out[target].add(tp)
            owner[tp] = target
    _rebalance(out, eligible)
    return out


def _fair_quota(members: Mapping[str, MemberSpec], eligible: Mapping[TopicPartition, list[str]]) -> dict[str, int]:
    """Most partitions a member may keep: ceil(partitions it could take / members competing for them)."""
    quota = {}
    for member in members:
        mine = [tp for tp, ms in eligible.items() if member in ms]
        rivals = {m for tp in mine for m in eligible[tp]} or {member}
        quota[member] = -(-len({tp for tp, ms in eligible.items() if set(ms) & rivals}) // len(rivals))
    return quota


def _rebalance(out: Assignment, eligible: Mapping[TopicPartition, list[str]]) -> None:
    """Move partitions from the most to the least loaded eligible member until no move helps."""
    for _ in range(sum(len(v) for v in out.values()) + 1):
        moved = False
        for giver in sorted(out, key=lambda m: (-len(out[m]), m)):
            for tp in sorted(out[giver], reverse=True):
                takers = [m for m in eligible[tp] if len(out[m]) + 1 < len(out[giver])]
                if takers:
                    taker = min(takers, key=lambda m: (len(out[m]), m))
                    out[giver].discard(tp)
                    out[taker].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


def range_(members: Mapping[str, MemberSpec], partitions: Mapping[str, int]) -> Assignment:
    """Sticky per-topic ranges: members keep partitions within their quota, the rest fill in order."""
    out: Assignment = {m: set() for m in members}
    for topic in sorted({t for spec in members.values() for t in spec.topics}):
        count = partitions.get(topic, 0)
        subscribed = sorted(m for m, spec in members.items() if topic in spec.topics)
        if not count or not subscribed:
            continue
        base, extra = divmod(count, len(subscribed))
        current = {
            m: sorted(tp.partition for tp in members[m].current if tp.topic == topic and tp.partition < count)
            for m in subscribed
        }
        # The members allowed one more are those already holding that many, then the first in order.
        holders = [m for m in subscribed if len(current[m]) > base]
        plus = set((holders + [m for m in subscribed if m not in holders])[:extra])
        quota = {m: base + (m in plus) for m in subscribed}
        taken: set[int] = set()
        for m in subscribed:
            keep = [p for p in current[m] if p not in taken][: quota[m]]
            taken.update(keep)
            out[m].update(TopicPartition(topic, p) for p in keep)
        free = iter(p for p in range(count) if p not in taken)
        for m in subscribed:
            while len([tp for tp in out[m] if tp.topic == topic]) < quota[m]:
                out[m].add(TopicPartition(topic, next(free)))
    return out


def _eligible(members: Mapping[str, MemberSpec], partitions: Mapping[str, int]) -> dict[TopicPartition, list[str]]:
    """Each subscribed partition with the members subscribed to its topic."""
    out: dict[TopicPartition, list[str]] = {}
    for topic in sorted({t for spec in members.values() for t in spec.topics}):
        subscribed = sorted(m for m, spec in members.items() if topic in spec.topics)
        for p in range(partitions.get(topic, 0)):
            out[TopicPartition(topic, p)] = subscribed
    return out


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
DEFAULT_ASSIGNOR = "uniform"  # KIP-848's default group.consumer.assignors entry
