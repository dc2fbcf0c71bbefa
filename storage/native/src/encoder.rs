//! The producer's bulk path in safe Rust, free of Python: whole RecordBatch v2 batches from
//! record columns, split where storage.records.BatchBuilder splits; the stamp that gives a
//! built batch its producer id, epoch and sequence at send time; Kafka's murmur2 partitioner.
//!
//! Why columns: a producer handed 200k records should not pay a Python call, a builder
//! append and a size computation per record. The bindings (bindings/encode.rs) turn Python
//! sequences into the borrowed slices of `Columns` (bytes are not copied) and run
//! `encode_batches` without the GIL, so the producer's sender thread keeps writing meanwhile.

#![forbid(unsafe_code)] // the core is safe Rust: `unsafe` lives in bindings/ only

use crate::codec::{self, BatchFields, CodecError, HeaderIn, Result};
use crate::compression;

/// Records given column by column; `values` sets the record count, every other column is
/// either absent (all null / no headers / one timestamp) or as long as `values`.
pub struct Columns<'a> {
    pub values: &'a [Option<&'a [u8]>],
    pub keys: Option<&'a [Option<&'a [u8]>]>,
    /// Every record's headers end to end; record `i` has `headers[header_ends[i-1]..header_ends[i]]`.
    pub headers: &'a [HeaderIn<'a>],
    pub header_ends: Option<&'a [usize]>,
    pub timestamps: Timestamps,
}

/// A timestamp per record, or one for all (the caller's "now").
pub enum Timestamps {
    All(i64),
    Each(Vec<i64>),
}

#[allow(clippy::len_without_is_empty)]
impl<'a> Columns<'a> {
    pub fn len(&self) -> usize {
        self.values.len()
    }

    #[inline]
    fn key(&self, i: usize) -> Option<&'a [u8]> {
        self.keys.and_then(|k| k[i])
    }

    #[inline]
    fn headers(&self, i: usize) -> &[HeaderIn<'a>] {
        match self.header_ends {
            None => &[],
            Some(ends) => &self.headers[if i == 0 { 0 } else { ends[i - 1] }..ends[i]],
        }
    }

    #[inline]
    fn timestamp(&self, i: usize) -> i64 {
        match &self.timestamps {
            Timestamps::All(t) => *t,
            Timestamps::Each(ts) => ts[i],
        }
    }

    /// Columns of unequal length are a caller bug, caught before any encoding.
    pub fn check(&self) -> Result<()> {
        let n = self.len();
        let ok = self.keys.is_none_or(|k| k.len() == n)
            && self.header_ends.is_none_or(|h| h.len() == n)
            && match &self.timestamps {
                Timestamps::All(_) => true,
                Timestamps::Each(ts) => ts.len() == n,
            };
        if ok {
            Ok(())
        } else {
            Err(CodecError::Value("values, keys, headers and timestamps differ in length".into()))
        }
    }
}

/// How every batch of one call is built.
#[derive(Debug, Clone, Copy)]
pub struct EncodeOptions {
    /// A batch's uncompressed size limit (header included); the first record of a batch is
    /// always accepted, so one oversized record still makes a batch of its own.
    pub max_bytes: i64,
    pub codec: u8,
    pub is_transactional: bool,
}

/// Where one batch lies in the columns, as `plan` decided: records [start, end), its exact
/// uncompressed size (header included) and its timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub size: usize,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
}

impl Span {
    pub fn record_count(&self) -> usize {
        self.end - self.start
    }
}

const TRANSACTIONAL: i16 = 0x10;
const NO_PRODUCER_ID: i64 = -1;
const NO_PRODUCER_EPOCH: i16 = -1;
const NO_SEQUENCE: i32 = -1;
const NO_PARTITION_LEADER_EPOCH: i32 = -1;

/// Split the records into batches exactly as BatchBuilder.append splits them: records in
/// order; a record opens a new batch when the batch's exact uncompressed size (header plus
/// records, BatchBuilder.estimated_size) would pass `max_bytes`, unless it is the batch's
/// first. Sizes only - nothing is encoded - so the caller can allocate every batch's
/// buffer before encoding.
pub fn plan(cols: &Columns, opts: &EncodeOptions) -> Result<Vec<Span>> {
    cols.check()?;
    if opts.codec > compression::ZSTD {
        return Err(CodecError::Value(format!("unknown compression type {}", opts.codec)));
    }
    let mut spans = Vec::new();
    let mut open: Option<Span> = None;
    let mut i = 0;
    while i < cols.len() {
        let ts = cols.timestamp(i);
        let span = open.get_or_insert(Span {
            start: i,
            end: i,
            size: codec::HEADER_SIZE,
            base_timestamp: ts,
            max_timestamp: ts,
        });
        let size = codec::record_size(record_body(cols, span, i)?.1);
        if span.end > span.start && (span.size + size) as i64 > opts.max_bytes {
            spans.extend(open.take());
            continue; // the same record opens the next batch, sized again at offset delta 0
        }
        span.end += 1;
        span.size += size;
        span.max_timestamp = span.max_timestamp.max(ts);
        i += 1;
    }
    spans.extend(open);
    Ok(spans)
}

/// (offset delta, body size, timestamp delta) of record `i` in the batch `span` opens.
#[inline]
fn record_body(cols: &Columns, span: &Span, i: usize) -> Result<(i32, usize, i64)> {
    let ts = cols.timestamp(i);
    let delta = ts
        .checked_sub(span.base_timestamp)
        .ok_or_else(|| CodecError::Value(format!("timestamp delta out of int64 range: {ts}")))?;
    let offset_delta =
        i32::try_from(i - span.start).map_err(|_| CodecError::Value("too many records for one batch".into()))?;
    Ok((
        offset_delta,
        codec::record_body_size(offset_delta, delta, cols.key(i), cols.values[i], cols.headers(i)),
        delta,
    ))
}

fn fields(span: &Span, opts: &EncodeOptions) -> BatchFields {
    BatchFields {
        base_offset: 0,
        partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
        attributes: opts.codec as i16 | if opts.is_transactional { TRANSACTIONAL } else { 0 },
        base_timestamp: span.base_timestamp,
        max_timestamp: span.max_timestamp,
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        base_sequence: NO_SEQUENCE,
    }
}

/// The batch of `span`, uncompressed, written straight into `out`, which must be exactly
/// `span.size` bytes (the caller allocates it from the plan).
pub fn encode_uncompressed(cols: &Columns, span: &Span, opts: &EncodeOptions, out: &mut [u8]) -> Result<()> {
    if out.len() != span.size {
        return Err(CodecError::Value(format!("a buffer of {} bytes for a batch of {}", out.len(), span.size)));
    }
    let mut sink = codec::SliceSink { buf: out, pos: codec::HEADER_SIZE };
    put_records(cols, span, &mut sink)?;
    if sink.pos != span.size {
        // never happens (sizes and bytes share one rule); checked because the buffer's
        // tail would otherwise be left as uninitialised bytes
        return Err(CodecError::Value(format!("records filled {} of {} bytes", sink.pos, span.size)));
    }
    codec::fill_header(out, span.record_count(), &fields(span, opts))
}

/// The batch of `span` compressed with `opts.codec` (its records go through `scratch`).
pub fn encode_compressed(cols: &Columns, span: &Span, opts: &EncodeOptions, scratch: &mut Vec<u8>) -> Result<Vec<u8>> {
    scratch.clear();
    put_records(cols, span, scratch)?;
    codec::assemble(&compression::compress(opts.codec, scratch)?, span.record_count(), &fields(span, opts))
}

fn put_records(cols: &Columns, span: &Span, out: &mut impl codec::Sink) -> Result<()> {
    for i in span.start..span.end {
        let (offset_delta, body, delta) = record_body(cols, span, i)?;
        codec::put_record(out, offset_delta, delta, cols.key(i), cols.values[i], cols.headers(i), body)?;
    }
    Ok(())
}

/// Every batch of `cols`, whole (plan + encode): what the bindings do in two steps.
#[cfg(test)]
pub fn encode_batches(cols: &Columns, opts: &EncodeOptions) -> Result<Vec<(Span, Vec<u8>)>> {
    let mut scratch = Vec::new();
    plan(cols, opts)?
        .into_iter()
        .map(|span| {
            let data = if opts.codec == compression::NONE {
                let mut data = vec![0; span.size];
                encode_uncompressed(cols, &span, opts, &mut data)?;
                data
            } else {
                encode_compressed(cols, &span, opts, &mut scratch)?
            };
            Ok((span, data))
        })
        .collect()
}

/// Give the single batch `batch` its producer id, epoch and base sequence. The CRC is
/// updated for the change, not recomputed (codec::restamp_producer): constant time per
/// batch, and bytes damaged since the batch was built stay detectable - a stamp never turns
/// a wrong CRC into a right one.
pub fn stamp(batch: &mut [u8], producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Result<()> {
    let header = codec::parse_header(batch, 0, false)?;
    let size = header.batch_length as usize + codec::LOG_OVERHEAD;
    if size != batch.len() {
        return Err(CodecError::Value(format!(
            "the buffer holds {} bytes but its batch is {size}: stamp one whole batch",
            batch.len()
        )));
    }
    codec::restamp_producer(batch, producer_id, producer_epoch, base_sequence);
    Ok(())
}

const MURMUR2_SEED: u32 = 0x9747_b28c;
const MURMUR2_M: u32 = 0x5bd1_e995;

/// Kafka's Utils.murmur2 (MurmurHash2, 32-bit, little-endian words), as Java's int.
pub fn murmur2(data: &[u8]) -> i32 {
    let mut h = MURMUR2_SEED ^ data.len() as u32;
    let mut words = data.chunks_exact(4);
    for word in &mut words {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]).wrapping_mul(MURMUR2_M);
        k ^= k >> 24;
        h = h.wrapping_mul(MURMUR2_M) ^ k.wrapping_mul(MURMUR2_M);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        // Java's switch falls through from the highest remaining byte down, then multiplies once
        if rest.len() == 3 {
            h ^= (rest[2] as u32) << 16;
        }
        if rest.len() >= 2 {
            h ^= (rest[1] as u32) << 8;
        }
        h = (h ^ rest[0] as u32).wrapping_mul(MURMUR2_M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(MURMUR2_M);
    (h ^ (h >> 15)) as i32
}

/// BuiltInPartitioner.partitionForKey: toPositive(murmur2(key)) % partitions
/// (toPositive clears the sign bit; it is not abs).
#[inline]
pub fn murmur2_partition(key: &[u8], partitions: u32) -> u32 {
    (murmur2(key) as u32 & 0x7fff_ffff) % partitions
}
