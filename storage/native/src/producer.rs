//! One producer's state in one partition and the check of a client batch against it
//! (docs/kafka-formats.md §5.1: duplicate window, epoch, sequence, transaction state).
//!
//! The one implementation of those rules: storage/producer_state.py's `ProducerAppend.check_data`
//! (every append that catches up first) and bindings/append.rs's `quiet_append` (a lone durable
//! batch, issue 26) both call `check`, so the quiet path cannot judge a batch differently from
//! the general one. Plain Rust with no Python in it; bindings/producer.rs is its Python face
//! (storage._native.ProducerStateEntry), and the unit tests below drive it against a model.

use std::collections::VecDeque;

/// Batches of a producer remembered for duplicate detection (`max.in.flight.requests.per.connection` ≤ 5).
pub const BATCH_WINDOW: usize = 5;
/// `current_txn_first_offset` of a producer with no open transaction.
pub const NO_OFFSET: i64 = -1;
const INT32_MAX: i64 = i32::MAX as i64;

/// Where one data batch of a producer landed: enough to answer its retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i64,
    pub last_seq: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub timestamp: i64,
}

/// What the partition remembers of one producer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub producer_id: i64,
    pub epoch: i64,
    pub coordinator_epoch: i64,
    pub last_timestamp: i64,
    pub current_txn_first_offset: i64,
    /// The last BATCH_WINDOW data batches, oldest first.
    pub batches: VecDeque<BatchMeta>,
}

impl Entry {
    /// A producer the partition has seen nothing of yet (epoch unknown).
    pub fn new(producer_id: i64) -> Self {
        Entry {
            producer_id,
            epoch: -1,
            coordinator_epoch: -1,
            last_timestamp: -1,
            current_txn_first_offset: NO_OFFSET,
            batches: VecDeque::with_capacity(BATCH_WINDOW),
        }
    }

    pub fn last_seq(&self) -> i64 {
        self.batches.back().map_or(-1, |b| b.last_seq)
    }

    pub fn has_open_txn(&self) -> bool {
        self.current_txn_first_offset >= 0
    }

    /// The remembered batch a retry of (epoch, first_seq..last_seq) repeats, if any.
    pub fn find_duplicate(&self, epoch: i64, first_seq: i64, last_seq: i64) -> Option<BatchMeta> {
        if epoch != self.epoch {
            return None;
        }
        self.batches.iter().find(|b| b.first_seq == first_seq && b.last_seq == last_seq).copied()
    }

    /// Any change of epoch clears the sequence window: the new epoch starts at 0.
    pub fn update_epoch(&mut self, epoch: i64) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.batches.clear();
        }
    }

    /// A data batch written at meta's offsets (checked, or replayed from the log: no checks here).
    pub fn add_batch(&mut self, epoch: i64, meta: BatchMeta, is_transactional: bool) {
        self.update_epoch(epoch);
        if self.batches.len() == BATCH_WINDOW {
            self.batches.pop_front();
        }
        self.batches.push_back(meta);
        self.last_timestamp = meta.timestamp;
        if is_transactional && !self.has_open_txn() {
            self.current_txn_first_offset = meta.first_offset;
        }
    }
}

/// Why a batch is refused: the storage.errors class it is raised as, with its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    InvalidRecord(String),
    InvalidProducerEpoch(String),
    OutOfOrderSequence(String),
    UnknownProducerId(String),
    InvalidTxnState(String),
}

impl Refusal {
    /// The storage.errors class name and the message.
    pub fn parts(&self) -> (&'static str, &str) {
        match self {
            Refusal::InvalidRecord(m) => ("InvalidRecordError", m),
            Refusal::InvalidProducerEpoch(m) => ("InvalidProducerEpochError", m),
            Refusal::OutOfOrderSequence(m) => ("OutOfOrderSequenceError", m),
            Refusal::UnknownProducerId(m) => ("UnknownProducerIdError", m),
            Refusal::InvalidTxnState(m) => ("InvalidTxnStateError", m),
        }
    }
}

/// The producer fields of a client batch's header.
#[derive(Clone, Copy, Debug)]
pub struct Batch {
    pub producer_id: i64,
    pub epoch: i64,
    pub base_seq: i64,
    pub last_seq: i64,
    pub is_transactional: bool,
}

/// A batch that may be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A retry of a remembered batch: answer with its offsets, write nothing.
    Duplicate(BatchMeta),
    /// New data; `opens_txn`: a transactional batch of a producer with no open transaction (the
    /// caller's transaction verifier, KIP-890 part 1, has the last word on it).
    New { opens_txn: bool },
}

/// Kafka's client-origin sequence rule (docs/kafka-formats.md §5.1 step 3), with txlog's rule for
/// unknown producers: one the partition knows nothing of may only start at sequence 0, since a
/// higher one means its state was expired or evicted and a retry of an old batch could pass as new
/// data (docs/reliability-scenarios.md scenarios 5 and 9).
pub fn check_sequence(entry: Option<&Entry>, epoch: i64, first_seq: i64) -> Result<(), Refusal> {
    let Some(entry) = entry else {
        if first_seq != 0 {
            return Err(Refusal::UnknownProducerId(format!(
                "partition has no state for this producer and the batch starts at sequence {first_seq}, not 0"
            )));
        }
        return Ok(());
    };
    if epoch != entry.epoch {
        if first_seq != 0 && entry.epoch != -1 {
            return Err(Refusal::OutOfOrderSequence(format!(
                "new epoch {epoch} must start at sequence 0, got {first_seq}"
            )));
        }
        return Ok(());
    }
    let last = entry.last_seq();
    if first_seq == last + 1 || (first_seq == 0 && last == INT32_MAX) || (last == -1 && entry.epoch == -1) {
        return Ok(());
    }
    let expected = if last == INT32_MAX { 0 } else { last + 1 };
    Err(Refusal::OutOfOrderSequence(format!("expected sequence {expected}, got {first_seq} (epoch {epoch})")))
}

/// Whether a client batch may be written given its producer's entry (None: the partition has
/// none), or the retry it repeats; never changes the entry.
pub fn check(entry: Option<&Entry>, b: &Batch) -> Result<Verdict, Refusal> {
    if b.producer_id < 0 {
        if b.is_transactional {
            return Err(Refusal::InvalidRecord("a transactional batch must carry a producer id".into()));
        }
        return Ok(Verdict::New { opens_txn: false });
    }
    if b.base_seq < 0 || b.epoch < 0 {
        return Err(Refusal::InvalidRecord("an idempotent batch needs a non-negative epoch and base sequence".into()));
    }
    if let Some(e) = entry {
        if let Some(dup) = e.find_duplicate(b.epoch, b.base_seq, b.last_seq) {
            return Ok(Verdict::Duplicate(dup));
        }
        if b.epoch < e.epoch {
            return Err(Refusal::InvalidProducerEpoch(format!(
                "producer {} epoch {} is older than the partition's epoch {}",
                b.producer_id, b.epoch, e.epoch
            )));
        }
    }
    check_sequence(entry, b.epoch, b.base_seq)?;
    let open_epoch = entry.filter(|e| e.has_open_txn()).map(|e| e.epoch);
    if !b.is_transactional {
        if open_epoch.is_some() {
            return Err(Refusal::InvalidTxnState(format!(
                "producer {} sent a non-transactional batch while its transaction is open",
                b.producer_id
            )));
        }
        return Ok(Verdict::New { opens_txn: false });
    }
    match open_epoch {
        Some(open) if open != b.epoch => Err(Refusal::InvalidTxnState(format!(
            "producer {}'s transaction of epoch {open} is still open; epoch {} cannot write before its marker",
            b.producer_id, b.epoch
        ))),
        Some(_) => Ok(Verdict::New { opens_txn: false }),
        None => Ok(Verdict::New { opens_txn: true }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn meta(first_seq: i64, last_seq: i64, offset: i64) -> BatchMeta {
        BatchMeta {
            first_seq,
            last_seq,
            first_offset: offset,
            last_offset: offset + last_seq - first_seq,
            timestamp: offset,
        }
    }

    fn batch(producer_id: i64, epoch: i64, base_seq: i64, last_seq: i64, is_transactional: bool) -> Batch {
        Batch { producer_id, epoch, base_seq, last_seq, is_transactional }
    }

    #[test]
    fn window_keeps_the_last_five_and_an_epoch_change_clears_it() {
        let mut e = Entry::new(7);
        for s in 0..7 {
            e.add_batch(0, meta(s, s, s), false);
        }
        assert_eq!(e.batches.iter().map(|b| b.first_seq).collect::<Vec<_>>(), vec![2, 3, 4, 5, 6]);
        assert_eq!(check(Some(&e), &batch(7, 0, 2, 2, false)), Ok(Verdict::Duplicate(meta(2, 2, 2))));
        assert!(matches!(check(Some(&e), &batch(7, 0, 1, 1, false)), Err(Refusal::OutOfOrderSequence(_))));
        e.update_epoch(1);
        assert!(e.batches.is_empty() && e.last_seq() == -1);
    }

    #[test]
    fn messages_are_the_python_ones() {
        let mut e = Entry::new(3);
        e.add_batch(2, meta(0, 4, 0), false);
        let refused = |b: Batch| check(Some(&e), &b).unwrap_err().parts().1.to_string();
        assert_eq!(refused(batch(3, 1, 5, 5, false)), "producer 3 epoch 1 is older than the partition's epoch 2");
        assert_eq!(refused(batch(3, 2, 9, 9, false)), "expected sequence 5, got 9 (epoch 2)");
        assert_eq!(refused(batch(3, 3, 9, 9, false)), "new epoch 3 must start at sequence 0, got 9");
        assert_eq!(
            check(None, &batch(3, 0, 4, 4, false)).unwrap_err(),
            Refusal::UnknownProducerId(
                "partition has no state for this producer and the batch starts at sequence 4, not 0".into()
            )
        );
    }

    #[test]
    fn sequence_wraps_past_int32_max() {
        let mut e = Entry::new(1);
        e.add_batch(0, meta(INT32_MAX - 1, INT32_MAX, 0), false);
        assert_eq!(check(Some(&e), &batch(1, 0, 0, 0, false)), Ok(Verdict::New { opens_txn: false }));
        let err = check(Some(&e), &batch(1, 0, 1, 1, false)).unwrap_err();
        assert_eq!(err.parts().1, "expected sequence 0, got 1 (epoch 0)");
    }

    /// The rules written the way docs/kafka-formats.md §5.1 states them, step by step, as a
    /// second opinion for the property test below.
    fn model(entry: Option<&Entry>, b: &Batch) -> Result<Option<BatchMeta>, &'static str> {
        if b.producer_id < 0 {
            return if b.is_transactional { Err("InvalidRecordError") } else { Ok(None) };
        }
        if b.base_seq < 0 || b.epoch < 0 {
            return Err("InvalidRecordError");
        }
        match entry {
            None => {
                if b.base_seq != 0 {
                    return Err("UnknownProducerIdError");
                }
                Ok(None)
            }
            Some(e) => {
                if b.epoch == e.epoch {
                    for m in &e.batches {
                        if (m.first_seq, m.last_seq) == (b.base_seq, b.last_seq) {
                            return Ok(Some(*m));
                        }
                    }
                }
                if b.epoch < e.epoch {
                    return Err("InvalidProducerEpochError");
                }
                let in_order = if b.epoch != e.epoch {
                    b.base_seq == 0 || e.epoch == -1
                } else {
                    let last = e.batches.back().map_or(-1, |m| m.last_seq);
                    let next = if last == INT32_MAX { 0 } else { last + 1 };
                    b.base_seq == next || (last == -1 && e.epoch == -1)
                };
                if !in_order {
                    return Err("OutOfOrderSequenceError");
                }
                let open = e.current_txn_first_offset >= 0;
                if open && (!b.is_transactional || b.epoch != e.epoch) {
                    return Err("InvalidTxnStateError");
                }
                Ok(None)
            }
        }
    }

    fn arb_entry() -> impl Strategy<Value = Option<Entry>> {
        let metas = proptest::collection::vec((0i64..8, 0i64..3), 0..7);
        proptest::option::of((-1i64..3, -1i64..3, metas, any::<bool>()).prop_map(|(epoch, coord, metas, open)| {
            let mut e = Entry::new(9);
            e.epoch = epoch;
            e.coordinator_epoch = coord;
            for (i, (first, len)) in metas.into_iter().enumerate() {
                e.batches.push_back(meta(first, first + len, i as i64 * 10));
                if e.batches.len() > BATCH_WINDOW {
                    e.batches.pop_front();
                }
            }
            if open {
                e.current_txn_first_offset = 3;
            }
            e
        }))
    }

    proptest! {
        #[test]
        fn check_agrees_with_the_model(
            entry in arb_entry(),
            pid in prop_oneof![Just(9i64), Just(-1i64)],
            epoch in -1i64..4,
            base_seq in prop_oneof![Just(INT32_MAX), -1i64..10],
            len in 0i64..3,
            txn in any::<bool>(),
        ) {
            let b = batch(pid, epoch, base_seq, base_seq + len, txn);
            let got = check(entry.as_ref(), &b);
            let want = model(entry.as_ref(), &b);
            match (got, want) {
                (Ok(Verdict::Duplicate(m)), Ok(Some(w))) => prop_assert_eq!(m, w),
                (Ok(Verdict::New { opens_txn }), Ok(None)) => {
                    let open = entry.as_ref().is_some_and(|e| e.has_open_txn());
                    prop_assert_eq!(opens_txn, pid >= 0 && txn && !open);
                }
                (Err(r), Err(name)) => prop_assert_eq!(r.parts().0, name),
                (got, want) => prop_assert!(false, "check {:?} but the model {:?}", got, want),
            }
        }
    }
}
