//! The RecordBatch v2 codec in safe Rust, free of Python: the Python bindings (bindings/)
//! and the property tests both drive it (docs/kafka-formats.md §1, §2).
//!
//! Every read is bounds-checked through `Reader`; running off the end of a region is
//! `CodecError::Truncated`, any other rule broken is `CodecError::Corrupt` with the byte
//! position inside the region. Nothing here panics on any input (the proptests feed it
//! arbitrary bytes), and nothing allocates more than a small multiple of its input
//! before the input has proven it holds that much.

#![forbid(unsafe_code)] // the core is safe Rust: `unsafe` lives in bindings/ only

use std::fmt;

/// Header field offsets inside a batch (docs/kafka-formats.md §1.1).
pub const HEADER_SIZE: usize = 61;
pub const LOG_OVERHEAD: usize = 12;
pub const CRC_COVERED_START: usize = 21;
pub const MIN_BATCH_LENGTH: i32 = (HEADER_SIZE - LOG_OVERHEAD) as i32; // 49
pub const MAGIC: i8 = 2;
/// Smallest record body: attributes, timestampDelta, offsetDelta, keyLength, valueLength,
/// headerCount - one byte each.
pub const MIN_RECORD_BODY: i64 = 6;
const INT32_MAX: i64 = i32::MAX as i64;

/// Why bytes are not a valid batch or records region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// A rule of the format is broken at `position` (relative to the region parsed).
    Corrupt { message: String, position: Option<usize> },
    /// The records end before `count` records were read.
    Truncated,
    /// The compressed stream cannot be inflated.
    Decompress(String),
    /// The compressed stream inflates past what its batch may hold (compression::inflation_limit).
    TooLarge(String),
    /// An encoder input out of the format's range (a caller bug: Python's ValueError).
    Value(String),
}

impl CodecError {
    pub fn corrupt(message: impl Into<String>, position: usize) -> Self {
        CodecError::Corrupt { message: message.into(), position: Some(position) }
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Corrupt { message, position: Some(p) } => write!(f, "{message} at byte {p}"),
            CodecError::Corrupt { message, position: None } => write!(f, "{message}"),
            CodecError::Truncated => write!(f, "truncated"),
            CodecError::Decompress(m) | CodecError::TooLarge(m) | CodecError::Value(m) => write!(f, "{m}"),
        }
    }
}

pub type Result<T> = std::result::Result<T, CodecError>;

// --- bounds-checked reading ---------------------------------------------------------

/// A cursor over a region; every accessor checks bounds.
pub struct Reader<'a> {
    pub data: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, pos: 0 }
    }

    #[inline]
    fn byte(&mut self) -> Result<u8> {
        let b = *self.data.get(self.pos).ok_or(CodecError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    /// Raw base-128 groups, at most `max_bytes` of them (Java gives up after 5 / 10).
    ///
    /// One and two groups are read here, inline in every caller: a record's framing is six varints,
    /// almost all of one or two bytes (lengths under 8 KiB, deltas, counts), and the call and the
    /// loop were a third of decoding a record (perf over `txlog consume`, issue 26). Longer ones,
    /// and every error, are `unsigned_long`'s, from the same position.
    #[inline(always)]
    fn unsigned(&mut self, max_bytes: u32, what: &str) -> Result<u64> {
        let pos = self.pos;
        if let Some(&first) = self.data.get(pos) {
            if first < 0x80 {
                self.pos = pos + 1;
                return Ok(first as u64);
            }
            if let Some(&second) = self.data.get(pos + 1) {
                if second < 0x80 {
                    self.pos = pos + 2;
                    return Ok((first & 0x7F) as u64 | (second as u64) << 7);
                }
            }
        }
        self.unsigned_long(max_bytes, what)
    }

    /// `unsigned` past its first two groups, or its error.
    #[cold]
    #[inline(never)]
    fn unsigned_long(&mut self, max_bytes: u32, what: &str) -> Result<u64> {
        let start = self.pos;
        let b = self.byte()?;
        if b < 0x80 {
            return Ok(b as u64);
        }
        let mut raw = (b & 0x7F) as u64;
        let mut shift = 7u32;
        loop {
            let b = self.byte()?;
            if shift < 64 {
                raw |= ((b & 0x7F) as u64) << shift;
            }
            if b < 0x80 {
                return Ok(raw);
            }
            shift += 7;
            if shift >= 7 * max_bytes {
                return Err(CodecError::corrupt(format!("{what} longer than {max_bytes} bytes"), start));
            }
        }
    }

    /// ZigZag int32, masked to 32 bits as Java's shifts do.
    #[inline(always)]
    pub fn varint(&mut self) -> Result<i32> {
        let raw = self.unsigned(5, "varint")? as u32;
        Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
    }

    /// ZigZag int64.
    #[inline(always)]
    pub fn varlong(&mut self) -> Result<i64> {
        let raw = self.unsigned(10, "varlong")?;
        Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }

    /// `size` bytes, or Truncated.
    #[inline]
    fn take(&mut self, size: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(size).ok_or(CodecError::Truncated)?;
        let slice = self.data.get(self.pos..end).ok_or(CodecError::Truncated)?;
        self.pos = end;
        Ok(slice)
    }
}

// --- the batch header -------------------------------------------------------------------

/// The 61 header bytes (docs/kafka-formats.md §1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

fn be<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&buf[at..at + N]);
    out
}

/// Decode the header at `buf[position]` and check magic, length, extent and (optionally) CRC.
/// Error positions are `position` (the batch's first byte), as the Python reader reports them.
pub fn parse_header(buf: &[u8], position: usize, verify_crc: bool) -> Result<Header> {
    let available = buf.len().saturating_sub(position);
    if available < HEADER_SIZE {
        return Err(CodecError::corrupt(
            format!("need {HEADER_SIZE} bytes for a batch header, {available} available"),
            position,
        ));
    }
    let h = &buf[position..position + HEADER_SIZE];
    let header = Header {
        base_offset: i64::from_be_bytes(be(h, 0)),
        batch_length: i32::from_be_bytes(be(h, 8)),
        partition_leader_epoch: i32::from_be_bytes(be(h, 12)),
        magic: h[16] as i8,
        crc: u32::from_be_bytes(be(h, 17)),
        attributes: i16::from_be_bytes(be(h, 21)),
        last_offset_delta: i32::from_be_bytes(be(h, 23)),
        base_timestamp: i64::from_be_bytes(be(h, 27)),
        max_timestamp: i64::from_be_bytes(be(h, 35)),
        producer_id: i64::from_be_bytes(be(h, 43)),
        producer_epoch: i16::from_be_bytes(be(h, 51)),
        base_sequence: i32::from_be_bytes(be(h, 53)),
        records_count: i32::from_be_bytes(be(h, 57)),
    };
    if header.magic != MAGIC {
        return Err(CodecError::corrupt(
            format!("unsupported magic {} (only {MAGIC} is supported)", header.magic),
            position,
        ));
    }
    if header.batch_length < MIN_BATCH_LENGTH {
        return Err(CodecError::corrupt(
            format!("batch length {} is below the minimum {MIN_BATCH_LENGTH}", header.batch_length),
            position,
        ));
    }
    let size = header.batch_length as usize + LOG_OVERHEAD;
    if size > available {
        return Err(CodecError::corrupt(
            format!("batch of {size} bytes but only {available} bytes available"),
            position,
        ));
    }
    if verify_crc {
        let actual = crc32c::crc32c(&buf[position + CRC_COVERED_START..position + size]);
        if actual != header.crc {
            return Err(CodecError::corrupt(
                format!("CRC mismatch: stored {:#010x}, computed {actual:#010x}", header.crc),
                position,
            ));
        }
    }
    Ok(header)
}

/// Attribute bits of the header (docs/kafka-formats.md §1.2).
pub const COMPRESSION_MASK: i16 = 0x07;
pub const TIMESTAMP_TYPE_MASK: i16 = 0x08;
pub const TRANSACTIONAL_MASK: i16 = 0x10;

impl Header {
    /// The whole batch's size in bytes, its 12-byte log overhead included (parse_header has
    /// checked batch_length >= MIN_BATCH_LENGTH, so this never wraps).
    pub fn size(&self) -> usize {
        self.batch_length.max(0) as usize + LOG_OVERHEAD
    }

    /// Attribute bits 0-2: the records region's compression code (5-7 name no codec).
    pub fn compression(&self) -> u8 {
        (self.attributes & COMPRESSION_MASK) as u8
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_MASK != 0
    }

    /// What every record of this batch takes from the header. With LOG_APPEND_TIME every
    /// record's timestamp is the header's maxTimestamp, whatever its delta says (§1.2).
    pub fn record_base(&self) -> RecordBase {
        let log_append_time = self.attributes & TIMESTAMP_TYPE_MASK != 0;
        RecordBase {
            offset: self.base_offset,
            timestamp: if log_append_time { self.max_timestamp } else { self.base_timestamp },
            use_deltas: !log_append_time,
            sequence: self.base_sequence,
        }
    }
}

/// The header fields a record's offset, timestamp and sequence are counted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBase {
    pub offset: i64,
    /// The base timestamp, or (without `use_deltas`) every record's timestamp.
    pub timestamp: i64,
    pub use_deltas: bool,
    pub sequence: i32,
}

impl RecordBase {
    /// The record's offset, exact past 64 bits (a damaged header may hold any base offset): what
    /// a decoder compares with the offsets a reader asked for.
    #[inline]
    pub fn offset_of(&self, rec: &RecordView) -> i128 {
        self.offset as i128 + rec.offset_delta as i128
    }

    #[inline]
    pub fn sequence_of(&self, rec: &RecordView) -> i64 {
        sequence_of(self.sequence, rec.offset_delta)
    }
}

/// `data[start:end]`, or a Value error naming the region (a caller's bug, not damage).
pub fn region(data: &[u8], start: usize, end: usize) -> Result<&[u8]> {
    data.get(start..end)
        .ok_or_else(|| CodecError::Value(format!("region [{start}, {end}) outside a buffer of {} bytes", data.len())))
}

/// The records region of the batch whose `header` was parsed at `buf[position]`, inflated
/// into `owned` when the batch is compressed.
pub fn records_region<'a>(buf: &'a [u8], position: usize, header: &Header, owned: &'a mut Vec<u8>) -> Result<&'a [u8]> {
    let start = position.saturating_add(HEADER_SIZE);
    let data = region(buf, start, position.saturating_add(header.size()))?;
    let codec = header.compression();
    if codec == crate::compression::NONE {
        return Ok(data);
    }
    *owned = crate::compression::decompress(codec, data)?;
    Ok(owned.as_slice())
}

// --- record decoding -------------------------------------------------------------------------

/// One record as slices of its region; `name` bytes of headers are raw (Java decodes them
/// leniently as UTF-8, which the caller does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset_delta: i32,
    pub timestamp_delta: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

#[inline]
fn length_prefixed<'a>(r: &mut Reader<'a>, what: &str) -> Result<Option<&'a [u8]>> {
    let size = r.varint()?;
    if size >= 0 {
        Ok(Some(r.take(size as usize)?))
    } else if size == -1 {
        Ok(None)
    } else {
        Err(CodecError::corrupt(format!("negative {what} length {size}"), r.pos))
    }
}

fn headers<'a>(r: &mut Reader<'a>, record_end: i64) -> Result<Vec<HeaderIn<'a>>> {
    let count = r.varint()?;
    if count < 0 {
        return Err(CodecError::corrupt(format!("negative header count {count}"), r.pos));
    }
    let left = record_end - r.pos as i64;
    if count != 0 && count as i64 > left {
        return Err(CodecError::corrupt(format!("header count {count} exceeds the {} bytes left", left.max(0)), r.pos));
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let size = r.varint()?;
        if size < 0 {
            return Err(CodecError::corrupt(format!("negative header key length {size}"), r.pos));
        }
        let name = r.take(size as usize)?;
        let value = length_prefixed(r, "header value")?;
        out.push((name, value));
    }
    Ok(out)
}

/// The next record of `r`; the record's length must match its fields exactly.
#[inline]
pub fn next_record<'a>(r: &mut Reader<'a>) -> Result<RecordView<'a>> {
    let length = r.varint()?;
    let record_end = r.pos as i64 + length as i64;
    r.byte()?; // attributes: unused by every magic-2 reader
    let timestamp_delta = r.varlong()?;
    let offset_delta = r.varint()?;
    let key = length_prefixed(r, "key")?;
    let value = length_prefixed(r, "value")?;
    let headers = if r.pos as i64 + 1 == record_end && r.data.get(r.pos) == Some(&0) {
        r.pos += 1;
        Vec::new()
    } else {
        let hs = headers(r, record_end)?;
        if r.pos as i64 != record_end {
            return Err(CodecError::corrupt(
                format!("record size mismatch: length says it ends at byte {record_end}, fields end at {}", r.pos),
                r.pos,
            ));
        }
        hs
    };
    Ok(RecordView { offset_delta, timestamp_delta, key, value, headers })
}

/// Decode `count` records that must fill `data` exactly, calling `each` per record.
pub fn for_each_record<'a>(
    data: &'a [u8],
    count: i32,
    mut each: impl FnMut(RecordView<'a>) -> Result<()>,
) -> Result<()> {
    let mut r = Reader::new(data);
    for _ in 0..count.max(0) {
        each(next_record(&mut r)?)?;
    }
    if r.pos != data.len() {
        return Err(CodecError::corrupt(
            format!("{} bytes remain after the last of {count} records", data.len() - r.pos),
            r.pos,
        ));
    }
    Ok(())
}

/// The producer sequence of the record at `offset_delta` (wraps from INT32_MAX to 0).
#[inline]
pub fn sequence_of(base_sequence: i32, offset_delta: i32) -> i64 {
    if base_sequence < 0 {
        return -1;
    }
    let wrap_at = INT32_MAX - base_sequence as i64;
    let od = offset_delta as i64;
    if od <= wrap_at {
        base_sequence as i64 + od
    } else {
        od - wrap_at - 1
    }
}

/// Count the records tiling `region` exactly and find the largest timestamp delta (the
/// append path's framing check: length varints and timestamp deltas only).
pub fn walk_records(region: &[u8]) -> Result<(i64, i64)> {
    let mut r = Reader::new(region);
    let mut seen: i64 = 0;
    let mut max_delta: Option<i64> = None;
    while r.pos < region.len() {
        let start = r.pos;
        let length = r.varint().map_err(|e| match e {
            CodecError::Corrupt { message, .. } => CodecError::Corrupt {
                message: format!("length of record {seen}: {message} at byte {start}"),
                position: None,
            },
            _ => CodecError::Corrupt {
                message: format!("length of record {seen}: truncated varint at byte {start}"),
                position: None,
            },
        })?;
        if (length as i64) < MIN_RECORD_BODY {
            return Err(CodecError::Corrupt {
                message: format!("record {seen} has length {length}, below the minimum {MIN_RECORD_BODY}"),
                position: None,
            });
        }
        let end = r.pos + length as usize;
        if end > region.len() {
            return Err(CodecError::Corrupt {
                message: format!("record lengths overrun the batch by {} bytes", end - region.len()),
                position: None,
            });
        }
        r.pos += 1; // attributes
        let ts_at = r.pos;
        let delta = r.varlong().map_err(|e| match e {
            CodecError::Corrupt { message, .. } => {
                CodecError::Corrupt { message: format!("timestamp delta: {message} at byte {ts_at}"), position: None }
            }
            _ => CodecError::Corrupt {
                message: format!("timestamp delta: truncated varlong at byte {ts_at}"),
                position: None,
            },
        })?;
        max_delta = Some(max_delta.map_or(delta, |m| m.max(delta)));
        r.pos = end;
        seen += 1;
    }
    Ok((seen, max_delta.unwrap_or(0)))
}

// --- record encoding ---------------------------------------------------------------------------

/// Where the encoder writes: a growing Vec, or a `SliceSink` of exactly the planned size.
pub trait Sink {
    fn put(&mut self, byte: u8);
    fn put_all(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, byte: u8) {
        self.push(byte);
    }

    #[inline]
    fn put_all(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Writes into a buffer allocated in advance from `record_size`, so an uncompressed batch
/// is encoded straight into its final memory. Every write is bounds-checked: a size that
/// disagreed with the bytes (a bug, which the tests rule out) would panic, never overrun.
pub struct SliceSink<'a> {
    pub buf: &'a mut [u8],
    pub pos: usize,
}

impl Sink for SliceSink<'_> {
    #[inline]
    fn put(&mut self, byte: u8) {
        self.buf[self.pos] = byte;
        self.pos += 1;
    }

    #[inline]
    fn put_all(&mut self, bytes: &[u8]) {
        self.buf[self.pos..self.pos + bytes.len()].copy_from_slice(bytes);
        self.pos += bytes.len();
    }
}

#[inline]
pub fn put_unsigned(out: &mut impl Sink, mut z: u64) {
    while z >= 0x80 {
        out.put((z as u8 & 0x7F) | 0x80);
        z >>= 7;
    }
    out.put(z as u8);
}

#[inline]
pub fn put_varint(out: &mut impl Sink, v: i32) {
    put_unsigned(out, ((v << 1) ^ (v >> 31)) as u32 as u64);
}

#[inline]
pub fn put_varlong(out: &mut impl Sink, v: i64) {
    put_unsigned(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// One record to encode; `name` of a header is its UTF-8 bytes.
pub struct RecordIn<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
    pub timestamp: i64,
}

fn length_of(len: usize, what: &str) -> Result<i32> {
    i32::try_from(len).map_err(|_| CodecError::Value(format!("{what} of {len} bytes is longer than a varint can say")))
}

#[inline]
fn put_bytes(out: &mut impl Sink, item: Option<&[u8]>, what: &str) -> Result<()> {
    match item {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, length_of(b.len(), what)?);
            out.put_all(b);
        }
    }
    Ok(())
}

/// Bytes a base-128 encoding of `z` takes (1..=10).
#[inline]
pub fn size_of_unsigned(z: u64) -> usize {
    ((64 - z.leading_zeros()).max(1) as usize).div_ceil(7)
}

#[inline]
pub fn size_of_varint(v: i32) -> usize {
    size_of_unsigned(((v << 1) ^ (v >> 31)) as u32 as u64)
}

#[inline]
pub fn size_of_varlong(v: i64) -> usize {
    size_of_unsigned(((v << 1) ^ (v >> 63)) as u64)
}

/// Size of a length-prefixed field (null is the 1-byte length -1). Lengths past int32 are
/// sized as varlongs; `put_record` rejects them, so a wrong size is never written.
#[inline]
fn size_of_bytes(item: Option<&[u8]>) -> usize {
    match item {
        None => 1,
        Some(b) => size_of_varlong(b.len() as i64) + b.len(),
    }
}

/// A header as the encoder takes it: name (UTF-8 bytes) and value (None = null).
pub type HeaderIn<'a> = (&'a [u8], Option<&'a [u8]>);

/// Size of one record's body (everything after its length varint). The one sizing rule:
/// the batch splitter (encoder.rs) and `put_record` both use it, so a split decided on this
/// size is exactly the bytes written - storage.records.BatchBuilder computes the same number.
#[inline]
pub fn record_body_size(
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[HeaderIn],
) -> usize {
    let mut body = 1
        + size_of_varlong(timestamp_delta)
        + size_of_varint(offset_delta)
        + size_of_bytes(key)
        + size_of_bytes(value)
        + size_of_varlong(headers.len() as i64);
    for (name, value) in headers {
        body += size_of_bytes(Some(name)) + size_of_bytes(*value);
    }
    body
}

/// Size of one record including its length varint.
#[inline]
pub fn record_size(body_size: usize) -> usize {
    size_of_varlong(body_size as i64) + body_size
}

/// Append one record (length varint, then the body of `body_size` bytes from
/// `record_body_size`); attributes are 0 (docs/kafka-formats.md §1.3).
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn put_record(
    out: &mut impl Sink,
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[HeaderIn],
    body_size: usize,
) -> Result<()> {
    put_varint(out, length_of(body_size, "record")?);
    out.put(0);
    put_varlong(out, timestamp_delta);
    put_varint(out, offset_delta);
    put_bytes(out, key, "key")?;
    put_bytes(out, value, "value")?;
    put_varint(out, length_of(headers.len(), "header count")?);
    for (name, value) in headers {
        put_bytes(out, Some(name), "header key")?;
        put_bytes(out, *value, "header value")?;
    }
    Ok(())
}

/// Append the records region: offsetDelta is the record's index, timestampDelta is
/// against `base_timestamp`.
pub fn encode_records(out: &mut Vec<u8>, records: &[RecordIn], base_timestamp: i64) -> Result<()> {
    for (index, rec) in records.iter().enumerate() {
        let delta = rec
            .timestamp
            .checked_sub(base_timestamp)
            .ok_or_else(|| CodecError::Value(format!("timestamp delta out of int64 range: {}", rec.timestamp)))?;
        let offset_delta = length_of(index, "offset delta")?;
        let body = record_body_size(offset_delta, delta, rec.key, rec.value, &rec.headers);
        put_record(out, offset_delta, delta, rec.key, rec.value, &rec.headers, body)?;
    }
    Ok(())
}

/// Batch header fields an encoder chooses.
#[derive(Debug, Clone, Copy)]
pub struct BatchFields {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub attributes: i16,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

/// A whole batch around an (already compressed) records payload.
pub fn assemble(payload: &[u8], count: usize, f: &BatchFields) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(HEADER_SIZE + payload.len());
    out.resize(HEADER_SIZE, 0);
    out.extend_from_slice(payload);
    fill_header(&mut out, count, f)?;
    Ok(out)
}

/// Write the 61 header bytes of `batch` (whose records region already follows them) and
/// its CRC, which covers attributes through the last byte. Lets an uncompressed batch be
/// encoded in place, with no copy of its records.
pub fn fill_header(batch: &mut [u8], count: usize, f: &BatchFields) -> Result<()> {
    let count = i32::try_from(count).map_err(|_| CodecError::Value("too many records for one batch".into()))?;
    fill_header_spanning(batch, count, count - 1, f)
}

/// `fill_header` for a batch whose offsets span more than its records: the cleaner's, which
/// keeps the original lastOffsetDelta (and so the batch's offsets and last sequence) while
/// some records are gone (Kafka's MemoryRecordsBuilder.overrideLastOffset).
pub fn fill_header_spanning(batch: &mut [u8], count: i32, last_offset_delta: i32, f: &BatchFields) -> Result<()> {
    if batch.len() < HEADER_SIZE {
        return Err(CodecError::Value("a batch is at least its 61-byte header".into()));
    }
    let batch_length =
        i32::try_from(batch.len() - LOG_OVERHEAD).map_err(|_| CodecError::Value("batch longer than 2 GiB".into()))?;
    let h = &mut batch[..HEADER_SIZE];
    h[0..8].copy_from_slice(&f.base_offset.to_be_bytes());
    h[8..12].copy_from_slice(&batch_length.to_be_bytes());
    h[12..16].copy_from_slice(&f.partition_leader_epoch.to_be_bytes());
    h[16] = MAGIC as u8;
    h[21..23].copy_from_slice(&f.attributes.to_be_bytes());
    h[23..27].copy_from_slice(&last_offset_delta.to_be_bytes());
    h[27..35].copy_from_slice(&f.base_timestamp.to_be_bytes());
    h[35..43].copy_from_slice(&f.max_timestamp.to_be_bytes());
    h[57..61].copy_from_slice(&count.to_be_bytes());
    set_producer(batch, f.producer_id, f.producer_epoch, f.base_sequence);
    Ok(())
}

/// Write producer id, epoch and base sequence into a batch's header and recompute its CRC
/// (all three lie inside the CRC's range, so the CRC is always rewritten with them).
pub fn set_producer(batch: &mut [u8], producer_id: i64, producer_epoch: i16, base_sequence: i32) {
    batch[PRODUCER_FIELDS].copy_from_slice(&producer_fields(producer_id, producer_epoch, base_sequence));
    let crc = crc32c::crc32c(&batch[CRC_COVERED_START..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// The leader's stamp on the batch at `buf[at]` as it appends it (storage/records.py
/// `RecordBatch.stamp_offset_into`, and the quiet append's, bindings/append.rs): its base offset,
/// its partition leader epoch when given, and its maxTimestamp when given and not the header's
/// (the leader corrects a header that understates it, docs/kafka-formats.md §1.2), the CRC then
/// recomputed (maxTimestamp is inside its range; base offset and epoch are not). The header's
/// batchLength says how far the batch extends, which must fit in `buf` when the CRC is recomputed.
pub fn stamp_offset(
    buf: &mut [u8],
    at: usize,
    base_offset: i64,
    leader_epoch: Option<i32>,
    max_timestamp: Option<i64>,
) -> Result<()> {
    let available = buf.len().saturating_sub(at);
    if available < HEADER_SIZE {
        return Err(CodecError::corrupt(
            format!("need {HEADER_SIZE} bytes for a batch header, {available} available"),
            at,
        ));
    }
    let batch = &mut buf[at..];
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    if let Some(epoch) = leader_epoch {
        batch[12..16].copy_from_slice(&epoch.to_be_bytes());
    }
    let Some(max_ts) = max_timestamp.filter(|&ts| ts != i64::from_be_bytes(be(batch, 35))) else {
        return Ok(());
    };
    let length = i32::from_be_bytes(be(batch, 8));
    let size = usize::try_from(length).ok().map(|n| n + LOG_OVERHEAD);
    let Some(size) = size.filter(|&n| (HEADER_SIZE..=available).contains(&n)) else {
        return Err(CodecError::corrupt(format!("batch length {length} does not fit the {available} bytes given"), at));
    };
    batch[35..43].copy_from_slice(&max_ts.to_be_bytes());
    let crc = crc32c::crc32c(&batch[CRC_COVERED_START..size]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Header bytes of producer id (8), producer epoch (2) and base sequence (4).
pub const PRODUCER_FIELDS: std::ops::Range<usize> = 43..57;

fn producer_fields(producer_id: i64, producer_epoch: i16, base_sequence: i32) -> [u8; 14] {
    let mut out = [0u8; 14];
    out[0..8].copy_from_slice(&producer_id.to_be_bytes());
    out[8..10].copy_from_slice(&producer_epoch.to_be_bytes());
    out[10..14].copy_from_slice(&base_sequence.to_be_bytes());
    out
}

/// Replace the producer fields of a whole batch (header checked for magic, length and
/// extent by the caller) and UPDATE its CRC rather than recompute it: the cost is the same
/// for a 100-byte and a 1 MiB batch, and since the stored CRC is only corrected by the
/// change, a batch whose other bytes were damaged keeps a CRC that does not match them.
///
/// Why it works: CRC-32C is affine over GF(2), so for messages of equal length
/// crc(a) ^ crc(b) ^ crc(c) == crc(a ^ b ^ c). With a = the old covered bytes, b = the
/// change (zero except the 14 producer bytes), c = all zeros, a ^ b ^ c is the new bytes; the
/// change and the zeros differ only in their first 36 bytes, so crc(b) ^ crc(c) is the CRC
/// difference of those 36-byte prefixes, shifted over the `n` equal bytes that follow.
pub fn restamp_producer(batch: &mut [u8], producer_id: i64, producer_epoch: i16, base_sequence: i32) {
    let new = producer_fields(producer_id, producer_epoch, base_sequence);
    let prefix = PRODUCER_FIELDS.end - CRC_COVERED_START; // 36: attributes .. base sequence
    let mut change = [0u8; 36];
    for (i, (old, new)) in batch[PRODUCER_FIELDS].iter().zip(new).enumerate() {
        change[PRODUCER_FIELDS.start - CRC_COVERED_START + i] = old ^ new;
    }
    let difference = crc32c::crc32c(&change) ^ crc32c::crc32c(&[0u8; 36][..prefix]);
    let following = batch.len() - PRODUCER_FIELDS.end;
    let old_crc = u32::from_be_bytes(be(batch, 17));
    let crc = old_crc ^ gf2::shift(difference, following);
    batch[PRODUCER_FIELDS].copy_from_slice(&new);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Arithmetic modulo the CRC-32C polynomial (reflected bit order, as the CRC registers hold
/// it): enough to move a CRC past `n` zero bytes in O(log n) steps.
mod gf2 {
    const POLY: u32 = 0x82F6_3B78; // CRC-32C, reflected
    const ONE: u32 = 1 << 31; // x^0 in reflected order

    /// a * b modulo POLY.
    const fn multiply(a: u32, mut b: u32) -> u32 {
        let mut product = 0;
        let mut bit = ONE;
        while bit != 0 {
            if a & bit != 0 {
                product ^= b;
            }
            bit >>= 1;
            b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        }
        product
    }

    /// X2N[k] = x^(2^k) modulo POLY.
    const X2N: [u32; 64] = {
        let mut table = [0u32; 64];
        let mut p = ONE >> 1; // x^1
        let mut k = 0;
        while k < 64 {
            table[k] = p;
            p = multiply(p, p);
            k += 1;
        }
        table
    };

    /// The CRC register `crc` advanced over `n` zero bytes (times x^(8n)): what
    /// crc32c_combine does with the second CRC zero, without its per-call matrix work.
    pub fn shift(crc: u32, n: usize) -> u32 {
        let mut power = ONE;
        let mut bits = n as u64; // the exponent is 8n = n * 2^3: n's bit j is x^(2^(j+3))
        let mut k = 3;
        while bits != 0 {
            if bits & 1 != 0 {
                power = multiply(X2N[k & 63], power);
            }
            bits >>= 1;
            k += 1;
        }
        multiply(power, crc)
    }
}
