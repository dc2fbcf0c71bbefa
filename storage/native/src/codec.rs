//! The RecordBatch v2 codec in safe Rust, free of Python: the Python bindings in lib.rs
//! and the property tests both drive it (docs/kafka-formats.md §1, §2).
//!
//! Every read is bounds-checked through `Reader`; running off the end of a region is
//! `CodecError::Truncated`, any other rule broken is `CodecError::Corrupt` with the byte
//! position inside the region. Nothing here panics on any input (the proptests feed it
//! arbitrary bytes), and nothing allocates more than a small multiple of its input
//! before the input has proven it holds that much.

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
            CodecError::Decompress(m) | CodecError::Value(m) => write!(f, "{m}"),
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
    #[inline]
    fn unsigned(&mut self, max_bytes: u32, what: &str) -> Result<u64> {
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
    #[inline]
    pub fn varint(&mut self) -> Result<i32> {
        let raw = self.unsigned(5, "varint")? as u32;
        Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
    }

    /// ZigZag int64.
    #[inline]
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
            format!("need {HEADER_SIZE} bytes for a batch header, {available} available"), position));
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
            format!("unsupported magic {} (only {MAGIC} is supported)", header.magic), position));
    }
    if header.batch_length < MIN_BATCH_LENGTH {
        return Err(CodecError::corrupt(
            format!("batch length {} is below the minimum {MIN_BATCH_LENGTH}", header.batch_length), position));
    }
    let size = header.batch_length as usize + LOG_OVERHEAD;
    if size > available {
        return Err(CodecError::corrupt(
            format!("batch of {size} bytes but only {available} bytes available"), position));
    }
    if verify_crc {
        let actual = crc32c::crc32c(&buf[position + CRC_COVERED_START..position + size]);
        if actual != header.crc {
            return Err(CodecError::corrupt(
                format!("CRC mismatch: stored {:#010x}, computed {actual:#010x}", header.crc), position));
        }
    }
    Ok(header)
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

fn headers<'a>(r: &mut Reader<'a>, record_end: i64) -> Result<Vec<(&'a [u8], Option<&'a [u8]>)>> {
    let count = r.varint()?;
    if count < 0 {
        return Err(CodecError::corrupt(format!("negative header count {count}"), r.pos));
    }
    let left = record_end - r.pos as i64;
    if count != 0 && count as i64 > left {
        return Err(CodecError::corrupt(
            format!("header count {count} exceeds the {} bytes left", left.max(0)), r.pos));
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
                r.pos));
        }
        hs
    };
    Ok(RecordView { offset_delta, timestamp_delta, key, value, headers })
}

/// Decode `count` records that must fill `data` exactly, calling `each` per record.
pub fn for_each_record<'a>(data: &'a [u8], count: i32, mut each: impl FnMut(RecordView<'a>) -> Result<()>)
                           -> Result<()> {
    let mut r = Reader::new(data);
    for _ in 0..count.max(0) {
        each(next_record(&mut r)?)?;
    }
    if r.pos != data.len() {
        return Err(CodecError::corrupt(
            format!("{} bytes remain after the last of {count} records", data.len() - r.pos), r.pos));
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
    if od <= wrap_at { base_sequence as i64 + od } else { od - wrap_at - 1 }
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
            CodecError::Corrupt { message, .. } =>
                CodecError::Corrupt { message: format!("length of record {seen}: {message} at byte {start}"), position: None },
            _ => CodecError::Corrupt { message: format!("length of record {seen}: truncated varint at byte {start}"),
                                       position: None },
        })?;
        if (length as i64) < MIN_RECORD_BODY {
            return Err(CodecError::Corrupt {
                message: format!("record {seen} has length {length}, below the minimum {MIN_RECORD_BODY}"),
                position: None });
        }
        let end = r.pos + length as usize;
        if end > region.len() {
            return Err(CodecError::Corrupt {
                message: format!("record lengths overrun the batch by {} bytes", end - region.len()),
                position: None });
        }
        r.pos += 1; // attributes
        let ts_at = r.pos;
        let delta = r.varlong().map_err(|e| match e {
            CodecError::Corrupt { message, .. } =>
                CodecError::Corrupt { message: format!("timestamp delta: {message} at byte {ts_at}"), position: None },
            _ => CodecError::Corrupt { message: format!("timestamp delta: truncated varlong at byte {ts_at}"),
                                       position: None },
        })?;
        max_delta = Some(max_delta.map_or(delta, |m| m.max(delta)));
        r.pos = end;
        seen += 1;
    }
    Ok((seen, max_delta.unwrap_or(0)))
}

// --- record encoding ---------------------------------------------------------------------------

#[inline]
pub fn put_unsigned(out: &mut Vec<u8>, mut z: u64) {
    while z >= 0x80 {
        out.push((z as u8 & 0x7F) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

#[inline]
pub fn put_varint(out: &mut Vec<u8>, v: i32) {
    put_unsigned(out, ((v << 1) ^ (v >> 31)) as u32 as u64);
}

#[inline]
pub fn put_varlong(out: &mut Vec<u8>, v: i64) {
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

fn put_bytes(out: &mut Vec<u8>, item: Option<&[u8]>, what: &str) -> Result<()> {
    match item {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, length_of(b.len(), what)?);
            out.extend_from_slice(b);
        }
    }
    Ok(())
}

/// Append the records region: offsetDelta is the record's index, timestampDelta is
/// against `base_timestamp`, attributes are 0 (docs/kafka-formats.md §1.3).
pub fn encode_records(out: &mut Vec<u8>, records: &[RecordIn], base_timestamp: i64) -> Result<()> {
    let mut body: Vec<u8> = Vec::with_capacity(256);
    for (index, rec) in records.iter().enumerate() {
        body.clear();
        body.push(0);
        let delta = rec.timestamp.checked_sub(base_timestamp)
            .ok_or_else(|| CodecError::Value(format!("timestamp delta out of int64 range: {}", rec.timestamp)))?;
        put_varlong(&mut body, delta);
        put_varint(&mut body, length_of(index, "offset delta")?);
        put_bytes(&mut body, rec.key, "key")?;
        put_bytes(&mut body, rec.value, "value")?;
        put_varint(&mut body, length_of(rec.headers.len(), "header count")?);
        for (name, value) in &rec.headers {
            put_bytes(&mut body, Some(name), "header key")?;
            put_bytes(&mut body, *value, "header value")?;
        }
        put_varint(out, length_of(body.len(), "record")?);
        out.extend_from_slice(&body);
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

/// A whole batch around an (already compressed) records payload; the CRC covers
/// attributes through the last payload byte.
pub fn assemble(payload: &[u8], count: usize, f: &BatchFields) -> Result<Vec<u8>> {
    let count = i32::try_from(count).map_err(|_| CodecError::Value("too many records for one batch".into()))?;
    let batch_length = i32::try_from(payload.len() + MIN_BATCH_LENGTH as usize)
        .map_err(|_| CodecError::Value("batch longer than 2 GiB".into()))?;
    let mut out = Vec::with_capacity(HEADER_SIZE + payload.len());
    out.extend_from_slice(&f.base_offset.to_be_bytes());
    out.extend_from_slice(&batch_length.to_be_bytes());
    out.extend_from_slice(&f.partition_leader_epoch.to_be_bytes());
    out.push(MAGIC as u8);
    out.extend_from_slice(&[0, 0, 0, 0]); // CRC, filled below
    out.extend_from_slice(&f.attributes.to_be_bytes());
    out.extend_from_slice(&(count - 1).to_be_bytes());
    out.extend_from_slice(&f.base_timestamp.to_be_bytes());
    out.extend_from_slice(&f.max_timestamp.to_be_bytes());
    out.extend_from_slice(&f.producer_id.to_be_bytes());
    out.extend_from_slice(&f.producer_epoch.to_be_bytes());
    out.extend_from_slice(&f.base_sequence.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[CRC_COVERED_START..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}
