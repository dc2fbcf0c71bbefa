//! The producer's per-record path: one RecordBatch v2 batch encoded a record at a time, as
//! `Producer.send` hands records over. storage.records.BatchBuilder is `RecordBatchBuilder`.
//!
//! Why incremental: the Python builder kept four lists per batch, sized every record in
//! Python and encoded the whole batch again at build. Here an append writes the record's final
//! bytes into the records region at once (offset delta = its index in the batch, timestamp
//! delta against the batch's first record), so the size check is exact by construction
//! (`estimated_size` is the header plus the bytes written) and `build` is a header, a CRC and,
//! for a compressed batch, one compression of the region.
//!
//! The split rule is encoder::plan's (the bulk path's), one rule for both: a batch's first
//! record is always accepted (an oversized record still makes a batch of its own); any other is
//! refused when header + records + its own size would pass `max_bytes`. Sizes come from
//! codec::record_body_size, the same function put_record's bytes follow.
//!
//! `OpenBatch` is the encoder, free of Python (the cargo tests drive it);
//! bindings/builder.rs's `RecordBatchBuilder` is its Python class.

#![forbid(unsafe_code)] // the core is safe Rust: `unsafe` lives in bindings/ only

use std::borrow::Cow;
use std::sync::Mutex;

use crate::codec::{self, BatchFields, CodecError, HeaderIn, Result};
use crate::compression;

const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_MASK: i16 = 0x10;
/// The most a new batch reserves up front: a larger limit (a 1 MiB batch.size, or none at all
/// for a one-off batch) grows from here, so a small batch never maps a large buffer.
const INITIAL_CAPACITY_LIMIT: usize = 64 * 1024;
/// How many records regions of dropped batches are kept for new ones (at most
/// SPARE_REGIONS x INITIAL_CAPACITY_LIMIT = 4 MiB, 1 MiB at the default batch.size). A fresh
/// region is new memory whose every page faults on first touch: 2-4 faults per 16 KiB batch
/// on the send loop's thread. A round of the sender settles up to 64 batches of 16 KiB (its
/// 1 MiB group), which is what the send loop takes back while the next round runs.
const SPARE_REGIONS: usize = 64;

/// Records regions of dropped batches (empty, their capacity intact) for new batches of the
/// same capacity (a producer's batches share one batch.size); the oldest goes when a newer
/// one comes and the list is full, so regions of a size nobody asks for any more drain away.
struct SpareRegions(Vec<Vec<u8>>);

impl SpareRegions {
    fn take(&mut self, capacity: usize) -> Option<Vec<u8>> {
        let at = self.0.iter().rposition(|r| r.capacity() == capacity)?;
        Some(self.0.remove(at))
    }

    /// Keep `records` unless it grew past the initial limit (a large batch's region is let go).
    fn keep(&mut self, mut records: Vec<u8>) {
        if records.capacity() == 0 || records.capacity() > INITIAL_CAPACITY_LIMIT {
            return;
        }
        if self.0.len() == SPARE_REGIONS {
            self.0.remove(0);
        }
        records.clear();
        self.0.push(records);
    }
}

/// The process's spare regions: one list, since a batch is dropped wherever its last reference
/// goes (the sender thread, a future) and taken by whichever thread opens the next.
static SPARE: Mutex<SpareRegions> = Mutex::new(SpareRegions(Vec::new()));

/// A records region with room for `capacity` bytes, a spare one if there is one.
fn region(capacity: usize) -> Vec<u8> {
    SPARE.lock().ok().and_then(|mut spare| spare.take(capacity)).unwrap_or_else(|| Vec::with_capacity(capacity))
}

/// What the producer reads back about one appended record, for its RecordMetadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub timestamp: i64,
    /// Serialized key / value size, -1 for null (as Kafka's RecordMetadata says it).
    pub key_size: i32,
    pub value_size: i32,
}

/// The header fields a batch is built with, chosen by the producer (some only at send time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub is_transactional: bool,
    pub codec: u8,
    /// Attribute bit 3: timestamps are LOG_APPEND_TIME.
    pub log_append_time_type: bool,
    /// With LOG_APPEND_TIME, the maxTimestamp readers report for every record (default: the
    /// largest record timestamp).
    pub log_append_time: Option<i64>,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            base_offset: 0,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            is_transactional: false,
            codec: compression::NONE,
            log_append_time_type: false,
            log_append_time: None,
        }
    }
}

impl BatchOptions {
    pub fn check(&self) -> Result<()> {
        if self.codec > compression::ZSTD {
            return Err(CodecError::Value(format!("unknown compression type {}", self.codec)));
        }
        Ok(())
    }

    fn attributes(&self) -> i16 {
        self.codec as i16
            | if self.log_append_time_type { TIMESTAMP_TYPE_MASK } else { 0 }
            | if self.is_transactional { TRANSACTIONAL_MASK } else { 0 }
    }
}

/// One batch being filled: its records region, encoded as records arrive, and what the
/// header needs.
#[derive(Debug, Clone)]
pub struct OpenBatch {
    records: Vec<u8>,
    appended: Vec<Appended>,
    base_timestamp: i64,
    max_timestamp: i64,
    max_bytes: i64,
    closed: bool,
}

impl Drop for OpenBatch {
    fn drop(&mut self) {
        if let Ok(mut spare) = SPARE.lock() {
            spare.keep(std::mem::take(&mut self.records));
        }
    }
}

/// A length as Kafka's RecordMetadata reports it: -1 for null.
fn size_of(item: Option<&[u8]>, what: &str) -> Result<i32> {
    item.map_or(Ok(-1), |b| {
        i32::try_from(b.len())
            .map_err(|_| CodecError::Value(format!("{what} of {} bytes is longer than a varint can say", b.len())))
    })
}

impl OpenBatch {
    pub fn new(max_bytes: i64) -> Self {
        OpenBatch {
            // Room for a full batch at once (up to INITIAL_CAPACITY_LIMIT), as Kafka's producer
            // takes a batch.size buffer: the region is not copied again and again as it grows.
            records: region(usize::try_from(max_bytes).unwrap_or(0).min(INITIAL_CAPACITY_LIMIT)),
            appended: Vec::new(),
            base_timestamp: 0,
            max_timestamp: 0,
            max_bytes,
            closed: false,
        }
    }

    pub fn record_count(&self) -> usize {
        self.appended.len()
    }

    /// The batch's exact uncompressed size so far, header included (an upper bound of a
    /// compressed batch's size).
    pub fn estimated_size(&self) -> usize {
        codec::HEADER_SIZE + self.records.len()
    }

    pub fn max_bytes(&self) -> i64 {
        self.max_bytes
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// No more appends (the batch is sealed for sending); building stays possible.
    pub fn close(&mut self) {
        self.closed = true;
    }

    pub fn appended(&self, index: usize) -> Option<Appended> {
        self.appended.get(index).copied()
    }

    /// The largest record timestamp, None while empty.
    pub fn max_timestamp(&self) -> Option<i64> {
        (!self.appended.is_empty()).then_some(self.max_timestamp)
    }

    /// The uncompressed records region.
    pub fn records(&self) -> &[u8] {
        &self.records
    }

    /// Encode the record into the batch and return its index, or None (the batch unchanged)
    /// when the batch is closed or the record would pass `max_bytes` (see the module doc).
    /// An error (a delta or length past the format's range) also leaves the batch unchanged.
    pub fn try_append(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[HeaderIn],
        timestamp: i64,
    ) -> Result<Option<usize>> {
        if self.closed {
            return Ok(None);
        }
        let index = self.appended.len();
        let base_timestamp = if index == 0 { timestamp } else { self.base_timestamp };
        let delta = timestamp.checked_sub(base_timestamp).ok_or_else(|| {
            CodecError::Value(format!(
                "timestamp {timestamp} is too far from the batch's first timestamp {base_timestamp}"
            ))
        })?;
        let offset_delta =
            i32::try_from(index).map_err(|_| CodecError::Value("too many records for one batch".into()))?;
        let appended = Appended { timestamp, key_size: size_of(key, "key")?, value_size: size_of(value, "value")? };
        let body = codec::record_body_size(offset_delta, delta, key, value, headers);
        let size = codec::record_size(body);
        // i128: max_bytes may be anything an i64 holds, sizes anything a usize does
        if index > 0 && (self.estimated_size() as i128 + size as i128) > self.max_bytes as i128 {
            return Ok(None);
        }
        let mark = self.records.len();
        if let Err(err) = codec::put_record(&mut self.records, offset_delta, delta, key, value, headers, body) {
            self.records.truncate(mark);
            return Err(err);
        }
        if index == 0 {
            self.base_timestamp = timestamp;
            self.max_timestamp = timestamp;
        } else {
            self.max_timestamp = self.max_timestamp.max(timestamp);
        }
        self.appended.push(appended);
        Ok(Some(index))
    }

    /// The header fields of the batch built with `opts`.
    pub fn fields(&self, opts: &BatchOptions) -> BatchFields {
        let max_timestamp = match opts.log_append_time {
            Some(time) if opts.log_append_time_type => time,
            _ => self.max_timestamp,
        };
        BatchFields {
            base_offset: opts.base_offset,
            partition_leader_epoch: opts.partition_leader_epoch,
            attributes: opts.attributes(),
            base_timestamp: self.base_timestamp,
            max_timestamp,
            producer_id: opts.producer_id,
            producer_epoch: opts.producer_epoch,
            base_sequence: opts.base_sequence,
        }
    }

    /// A batch holds at least one record.
    pub fn check_not_empty(&self) -> Result<()> {
        if self.appended.is_empty() {
            return Err(CodecError::Value("a batch needs at least one record".into()));
        }
        Ok(())
    }

    /// The whole batch, for callers that want a Vec (the Python class writes into its bytes).
    #[cfg(test)]
    pub fn build(&self, opts: &BatchOptions) -> Result<Vec<u8>> {
        opts.check()?;
        self.check_not_empty()?;
        let payload = payload_of(&self.records, opts.codec)?;
        let mut out = vec![0; codec::HEADER_SIZE + payload.len()];
        write_batch(&mut out, &payload, self.record_count(), &self.fields(opts))?;
        Ok(out)
    }
}

/// The records region as the batch stores it: compressed with `codec_id`, or borrowed.
pub fn payload_of(records: &[u8], codec_id: u8) -> Result<Cow<'_, [u8]>> {
    if codec_id == compression::NONE {
        Ok(Cow::Borrowed(records))
    } else {
        compression::compress(codec_id, records).map(Cow::Owned)
    }
}

/// Header, then `payload` (the records region as stored), into `out` of exactly their size.
pub fn write_batch(out: &mut [u8], payload: &[u8], count: usize, fields: &BatchFields) -> Result<()> {
    if out.len() != codec::HEADER_SIZE + payload.len() {
        return Err(CodecError::Value(format!(
            "a buffer of {} bytes for a batch of {}",
            out.len(),
            codec::HEADER_SIZE + payload.len()
        )));
    }
    out[codec::HEADER_SIZE..].copy_from_slice(payload);
    codec::fill_header(out, count, fields)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::codec::RecordIn;
    use crate::encoder::{self, Columns, EncodeOptions, Timestamps};

    use crate::tests::strategies::{recs, Rec};

    fn headers(r: &Rec) -> Vec<HeaderIn<'_>> {
        r.2.iter().map(|(n, v)| (n.as_slice(), v.as_deref())).collect()
    }

    fn append(batch: &mut OpenBatch, r: &Rec) -> Option<usize> {
        batch.try_append(r.0.as_deref(), r.1.as_deref(), &headers(r), r.3).unwrap()
    }

    /// The producer's loop: append to the open batch, open a new one when refused.
    fn incremental(recs: &[Rec], max_bytes: i64) -> Vec<(usize, OpenBatch)> {
        let mut out: Vec<(usize, OpenBatch)> = Vec::new();
        for (i, r) in recs.iter().enumerate() {
            if let Some((_, open)) = out.last_mut() {
                if append(open, r).is_some() {
                    continue;
                }
            }
            let mut open = OpenBatch::new(max_bytes);
            assert_eq!(append(&mut open, r), Some(0)); // a first record is always accepted
            out.push((i, open));
        }
        out
    }

    /// The same records by the bulk encoder (encoder.rs), batches and all.
    fn bulk(recs: &[Rec], max_bytes: i64, codec_id: u8) -> Vec<(encoder::Span, Vec<u8>)> {
        let values: Vec<Option<&[u8]>> = recs.iter().map(|r| r.1.as_deref()).collect();
        let keys: Vec<Option<&[u8]>> = recs.iter().map(|r| r.0.as_deref()).collect();
        let flat: Vec<HeaderIn> = recs.iter().flat_map(headers).collect();
        let ends: Vec<usize> = recs
            .iter()
            .scan(0, |n, r| {
                *n += r.2.len();
                Some(*n)
            })
            .collect();
        let cols = Columns {
            values: &values,
            keys: Some(&keys),
            headers: &flat,
            header_ends: Some(&ends),
            timestamps: Timestamps::Each(recs.iter().map(|r| r.3).collect()),
        };
        encoder::encode_batches(&cols, &EncodeOptions { max_bytes, codec: codec_id, is_transactional: false }).unwrap()
    }

    fn options(codec_id: u8) -> BatchOptions {
        BatchOptions { codec: codec_id, ..BatchOptions::default() }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Incremental and bulk share the split rule and the bytes: same batches, byte for byte.
        #[test]
        fn appends_split_and_encode_as_the_bulk_encoder(recs in recs(), max_bytes in -10i64..3_000,
                                                        codec_id in 0u8..5) {
            let ours = incremental(&recs, max_bytes);
            let theirs = bulk(&recs, max_bytes, codec_id);
            prop_assert_eq!(ours.len(), theirs.len());
            for ((start, open), (span, data)) in ours.iter().zip(&theirs) {
                prop_assert_eq!((*start, open.record_count()), (span.start, span.record_count()));
                prop_assert_eq!(open.estimated_size(), span.size);
                prop_assert_eq!(open.max_timestamp(), Some(span.max_timestamp));
                prop_assert_eq!(&open.build(&options(codec_id)).unwrap(), data);
            }
        }

        /// Every header option lands in the header, and records decode back to their input.
        #[test]
        fn builds_decode_back(recs in recs(), codec_id in 0u8..5, pid in any::<i64>(), epoch in any::<i16>(),
                              seq in any::<i32>(), base_offset in any::<i64>(), leader_epoch in any::<i32>(),
                              txn in any::<bool>(), log_append in any::<bool>(),
                              append_time in proptest::option::of(any::<i64>())) {
            let mut open = OpenBatch::new(i64::MAX);
            for r in &recs {
                prop_assert!(append(&mut open, r).is_some());
            }
            let opts = BatchOptions { base_offset, partition_leader_epoch: leader_epoch, producer_id: pid,
                                      producer_epoch: epoch, base_sequence: seq, is_transactional: txn, codec: codec_id,
                                      log_append_time_type: log_append, log_append_time: append_time };
            let data = open.build(&opts).unwrap();
            prop_assert_eq!(&data, &open.build(&opts).unwrap()); // building does not change the builder
            let h = codec::parse_header(&data, 0, true).unwrap();
            let max_ts = recs.iter().map(|r| r.3).max().unwrap();
            prop_assert_eq!((h.base_offset, h.partition_leader_epoch, h.producer_id, h.producer_epoch, h.base_sequence),
                            (base_offset, leader_epoch, pid, epoch, seq));
            prop_assert_eq!(h.attributes, codec_id as i16 | if log_append { 8 } else { 0 } | if txn { 16 } else { 0 });
            prop_assert_eq!(h.base_timestamp, recs[0].3);
            prop_assert_eq!(h.max_timestamp, if log_append { append_time.unwrap_or(max_ts) } else { max_ts });
            prop_assert_eq!(h.records_count as usize, recs.len());
            // the plain encoder's region, from all the records at once
            let records: Vec<RecordIn> = recs.iter().map(|r| RecordIn {
                key: r.0.as_deref(), value: r.1.as_deref(), headers: headers(r), timestamp: r.3 }).collect();
            let mut region = Vec::new();
            codec::encode_records(&mut region, &records, recs[0].3).unwrap();
            prop_assert_eq!(compression::decompress(codec_id, &data[codec::HEADER_SIZE..]).unwrap(), region);
            for (i, r) in recs.iter().enumerate() {
                let a = open.appended(i).unwrap();
                prop_assert_eq!((a.timestamp, a.key_size, a.value_size),
                                (r.3, r.0.as_ref().map_or(-1, |k| k.len() as i32), r.1.as_ref().map_or(-1, |v| v.len() as i32)));
            }
        }
    }

    fn rec(value_len: usize, ts: i64) -> Rec {
        (Some(b"k".to_vec()), Some(vec![1; value_len]), vec![], ts)
    }

    #[test]
    fn the_exact_fit_stays_and_one_byte_more_is_refused() {
        let mut whole = OpenBatch::new(i64::MAX);
        for _ in 0..3 {
            append(&mut whole, &rec(100, 5));
        }
        let exact = whole.estimated_size() as i64;
        assert_eq!(incremental(&vec![rec(100, 5); 3], exact).len(), 1);
        let split: Vec<usize> =
            incremental(&vec![rec(100, 5); 3], exact - 1).iter().map(|(_, b)| b.record_count()).collect();
        assert_eq!(split, vec![2, 1]);
        assert_eq!(incremental(&vec![rec(100, 5); 3], i64::MIN).len(), 3); // any limit: the first record goes in
    }

    #[test]
    fn a_refused_or_failed_append_changes_nothing() {
        let mut open = OpenBatch::new(200);
        assert_eq!(append(&mut open, &rec(10, i64::MAX)), Some(0));
        let before = (open.records().to_vec(), open.record_count(), open.max_timestamp());
        assert_eq!(append(&mut open, &rec(500, i64::MAX)), None); // too big
        assert!(open.try_append(None, None, &[], i64::MIN).is_err()); // delta past int64
        assert_eq!((open.records().to_vec(), open.record_count(), open.max_timestamp()), before);
    }

    #[test]
    fn a_negative_delta_keeps_the_first_timestamp_as_base() {
        let mut open = OpenBatch::new(i64::MAX);
        for ts in [1_000, 400, 1_600] {
            append(&mut open, &rec(3, ts));
        }
        let data = open.build(&options(0)).unwrap();
        let h = codec::parse_header(&data, 0, true).unwrap();
        assert_eq!((h.base_timestamp, h.max_timestamp), (1_000, 1_600));
        let mut deltas = Vec::new();
        codec::for_each_record(&data[codec::HEADER_SIZE..], 3, |r| {
            deltas.push(r.timestamp_delta);
            Ok(())
        })
        .unwrap();
        assert_eq!(deltas, vec![0, -600, 600]);
    }

    #[test]
    fn spare_regions_are_reused_by_capacity_and_bounded() {
        let mut spare = SpareRegions(Vec::new());
        let region = Vec::<u8>::with_capacity(16384);
        let at = region.as_ptr();
        spare.keep(region);
        assert!(spare.take(2048).is_none(), "another capacity is not handed out");
        let again = spare.take(16384).expect("the kept region");
        assert_eq!((again.as_ptr(), again.capacity(), again.len()), (at, 16384, 0));
        spare.keep(Vec::with_capacity(INITIAL_CAPACITY_LIMIT + 1));
        assert!(spare.0.is_empty(), "a region grown past the initial limit is let go");
        for _ in 0..SPARE_REGIONS {
            spare.keep(Vec::with_capacity(100));
        }
        spare.keep(Vec::with_capacity(200));
        assert_eq!(spare.0.len(), SPARE_REGIONS);
        assert!(spare.take(200).is_some(), "the newest is kept, the oldest let go");
    }

    #[test]
    fn a_dropped_batch_leaves_its_region_to_the_next_of_its_size() {
        // 12_345: a capacity no other test uses, so a parallel test cannot take it in between
        let mut first = OpenBatch::new(12_345);
        first.try_append(Some(b"k"), Some(b"v"), &[], 0).unwrap();
        let at = first.records().as_ptr();
        drop(first);
        let other = Vec::<u8>::with_capacity(12_345); // what the allocator would hand out the freed memory to
        let second = OpenBatch::new(12_345);
        assert_ne!(other.as_ptr(), at);
        assert_eq!((second.records().as_ptr(), second.record_count()), (at, 0));
        assert!(second.records().is_empty());
    }

    #[test]
    fn a_closed_batch_refuses_and_still_builds() {
        let mut open = OpenBatch::new(i64::MAX);
        append(&mut open, &rec(3, 1));
        let built = open.build(&options(1)).unwrap();
        open.close();
        open.close();
        assert!(open.is_closed());
        assert_eq!(append(&mut open, &rec(3, 1)), None);
        assert_eq!(open.build(&options(1)).unwrap(), built);
    }

    #[test]
    fn an_empty_batch_or_unknown_codec_does_not_build() {
        let mut open = OpenBatch::new(100);
        assert!(matches!(open.build(&options(0)), Err(CodecError::Value(_))));
        append(&mut open, &rec(3, 1));
        assert!(matches!(open.build(&options(5)), Err(CodecError::Value(_))));
        assert_eq!(open.estimated_size(), open.build(&options(0)).unwrap().len());
    }
}
