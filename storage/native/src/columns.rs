//! Decoded records gathered column by column in Arrow's memory layout, free of Python: the
//! bindings' ColumnBuilder (storage.arrow_records) hands these buffers to pyarrow as they are.
//!
//! Why columns: a Spark scan of millions of records should not create a Python object per
//! record; batches are added one by one and only whole columns cross into Python.

#![forbid(unsafe_code)] // the core is safe Rust: `unsafe` lives in bindings/ only

use crate::codec::{self, CodecError, Header, RecordView, Result};

/// An Arrow binary column: validity bitmap, int32 offsets, data.
#[derive(Debug, Default)]
pub struct BinaryColumn {
    validity: Vec<u8>,
    offsets: Vec<u8>,
    data: Vec<u8>,
    nulls: usize,
    len: usize,
}

impl BinaryColumn {
    fn push(&mut self, item: Option<&[u8]>) -> Result<()> {
        if self.len == 0 && self.offsets.is_empty() {
            self.offsets.extend_from_slice(&0i32.to_le_bytes());
        }
        if self.len.is_multiple_of(8) {
            self.validity.push(0);
        }
        match item {
            Some(b) => {
                self.data.extend_from_slice(b);
                let last = self.validity.len() - 1;
                self.validity[last] |= 1 << (self.len % 8);
            }
            None => self.nulls += 1,
        }
        let end = i32::try_from(self.data.len())
            .map_err(|_| CodecError::Value("a column holds more than 2 GiB: add fewer batches per builder".into()))?;
        self.offsets.extend_from_slice(&end.to_le_bytes());
        self.len += 1;
        Ok(())
    }

    /// Drop the items past `len`.
    fn truncate(&mut self, len: usize) {
        if self.len <= len {
            return;
        }
        let end = if self.offsets.len() >= (len + 1) * 4 {
            i32::from_le_bytes(self.offsets[len * 4..len * 4 + 4].try_into().unwrap_or([0; 4])) as usize
        } else {
            0
        };
        self.data.truncate(end);
        self.offsets.truncate((len + 1) * 4);
        self.validity.truncate(len.div_ceil(8));
        if !len.is_multiple_of(8) {
            if let Some(last) = self.validity.last_mut() {
                *last &= (1u8 << (len % 8)) - 1;
            }
        }
        self.nulls = (0..len).filter(|i| self.validity[i / 8] & (1 << (i % 8)) == 0).count();
        self.len = len;
    }

    /// The buffers, moved out (offsets as `offsets()` gives them, validity as `validity()`).
    pub fn into_parts(self) -> BinaryParts {
        let offsets = if self.offsets.is_empty() { 0i32.to_le_bytes().to_vec() } else { self.offsets };
        BinaryParts { offsets, data: self.data, validity: (self.nulls > 0).then_some(self.validity), nulls: self.nulls }
    }
}

#[cfg(test)] // the bindings take the buffers with into_parts
impl BinaryColumn {
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The validity bitmap, None when no item is null (Arrow's "all valid").
    pub fn validity(&self) -> Option<&[u8]> {
        (self.nulls > 0).then_some(self.validity.as_slice())
    }

    pub fn nulls(&self) -> usize {
        self.nulls
    }
}

/// A binary column's buffers, owned (see `BinaryColumn`'s accessors for the layout).
pub struct BinaryParts {
    pub offsets: Vec<u8>,
    pub data: Vec<u8>,
    pub validity: Option<Vec<u8>>,
    pub nulls: usize,
}

/// Every buffer of a `RecordColumns`, owned (see its accessors for the layout); the columns
/// not wanted are empty.
pub struct ColumnParts {
    pub rows: usize,
    pub offset: Vec<u8>,
    pub timestamp: Vec<u8>,
    pub sequence: Vec<u8>,
    pub batch_index: Vec<u8>,
    pub key: BinaryParts,
    pub value: BinaryParts,
    pub header_offsets: Vec<u8>,
    pub header_key: BinaryParts,
    pub header_value: BinaryParts,
}

/// Which columns a builder fills: a query reading `length(value)` should not copy keys and
/// headers. A column left out stays empty (no item per row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    pub offset: bool,
    pub timestamp: bool,
    pub sequence: bool,
    pub batch_index: bool,
    pub key: bool,
    pub value: bool,
    pub headers: bool,
}

impl Wanted {
    pub const ALL: Wanted = Wanted {
        offset: true,
        timestamp: true,
        sequence: true,
        batch_index: true,
        key: true,
        value: true,
        headers: true,
    };
    pub const NONE: Wanted = Wanted {
        offset: false,
        timestamp: false,
        sequence: false,
        batch_index: false,
        key: false,
        value: false,
        headers: false,
    };

    /// The flags of the named columns (the names of `RecordColumns`' accessors); an unknown
    /// name is an error naming it.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Wanted> {
        let mut wanted = Wanted::NONE;
        for name in names {
            let flag = match name {
                "offset" => &mut wanted.offset,
                "timestamp" => &mut wanted.timestamp,
                "sequence" => &mut wanted.sequence,
                "batch_index" => &mut wanted.batch_index,
                "key" => &mut wanted.key,
                "value" => &mut wanted.value,
                "headers" => &mut wanted.headers,
                other => return Err(CodecError::Value(format!("unknown builder column {other:?}"))),
            };
            *flag = true;
        }
        Ok(wanted)
    }
}

impl Default for Wanted {
    fn default() -> Self {
        Wanted::ALL
    }
}

/// One batch to decode in bulk (`RecordColumns::add_all`): the batch `header` parsed at
/// `buf[position]`.
pub struct Span<'a> {
    pub buf: &'a [u8],
    pub position: usize,
    pub header: Header,
}

/// The columns of every record added so far (see the accessors for the layout).
#[derive(Debug, Default)]
pub struct RecordColumns {
    wanted: Wanted,
    rows: usize,
    offset: Vec<u8>,      // int64 LE
    timestamp: Vec<u8>,   // int64 LE (epoch ms)
    sequence: Vec<u8>,    // int32 LE
    batch_index: Vec<u8>, // int32 LE: which added batch each row came from
    key: BinaryColumn,
    value: BinaryColumn,
    header_offsets: Vec<u8>, // int32 LE, rows + 1
    header_count: i32,
    header_key: BinaryColumn,
    header_value: BinaryColumn,
    batches: i32,
}

impl RecordColumns {
    /// A builder filling only the `wanted` columns.
    pub fn with_columns(wanted: Wanted) -> Self {
        RecordColumns { wanted, ..Default::default() }
    }

    /// `add` for each span in order, stopping at the first that fails (the earlier ones stay
    /// added, `batches()` counts them, so the caller can tell which batch failed). Returns the
    /// rows added.
    pub fn add_all(&mut self, spans: &[Span<'_>], lo: i64, hi: i64) -> Result<usize> {
        let mut added = 0;
        for span in spans {
            added += self.add(span.buf, span.position, &span.header, lo, hi)?;
        }
        Ok(added)
    }

    /// Decode the records of the batch `header` (parsed at `buf[position]`) and append those at
    /// offsets in [lo, hi); returns how many rows were added. A batch that fails half way adds
    /// nothing and does not count as added.
    pub fn add(&mut self, buf: &[u8], position: usize, header: &Header, lo: i64, hi: i64) -> Result<usize> {
        let before = self.rows;
        let result = self.add_rows(buf, position, header, lo, hi);
        if result.is_err() {
            self.truncate(before);
        }
        result?;
        self.batches += 1;
        Ok(self.rows - before)
    }

    fn add_rows(&mut self, buf: &[u8], position: usize, header: &Header, lo: i64, hi: i64) -> Result<()> {
        let mut owned = Vec::new();
        let data = codec::records_region(buf, position, header, &mut owned)?;
        // rows go straight into the columns: `add` truncates them back if the batch fails half way
        let base = header.record_base();
        let batch = self.batches;
        codec::for_each_record(data, header.records_count, |rec| {
            // int64 columns: offsets saturate and timestamps wrap, as the buffers hold them
            let offset = base.offset.saturating_add(rec.offset_delta as i64);
            if offset < lo || offset >= hi {
                return Ok(());
            }
            let ts = if base.use_deltas { base.timestamp.wrapping_add(rec.timestamp_delta) } else { base.timestamp };
            self.push(offset, ts, base.sequence_of(&rec) as i32, batch, &rec)
        })
    }

    fn push(&mut self, offset: i64, ts: i64, sequence: i32, batch: i32, rec: &RecordView) -> Result<()> {
        let w = self.wanted;
        if w.offset {
            self.offset.extend_from_slice(&offset.to_le_bytes());
        }
        if w.timestamp {
            self.timestamp.extend_from_slice(&ts.to_le_bytes());
        }
        if w.sequence {
            self.sequence.extend_from_slice(&sequence.to_le_bytes());
        }
        if w.batch_index {
            self.batch_index.extend_from_slice(&batch.to_le_bytes());
        }
        if w.key {
            self.key.push(rec.key)?;
        }
        if w.value {
            self.value.push(rec.value)?;
        }
        if w.headers {
            self.push_headers(rec)?;
        }
        self.rows += 1;
        Ok(())
    }

    fn push_headers(&mut self, rec: &RecordView) -> Result<()> {
        if self.header_offsets.is_empty() {
            self.header_offsets.extend_from_slice(&0i32.to_le_bytes());
        }
        for (name, value) in &rec.headers {
            // Arrow strings must be UTF-8: decode as Java does, invalid bytes become U+FFFD
            self.header_key.push(Some(String::from_utf8_lossy(name).as_bytes()))?;
            self.header_value.push(*value)?;
        }
        self.header_count = i32::try_from(self.header_key.len)
            .map_err(|_| CodecError::Value("too many headers for one builder".into()))?;
        self.header_offsets.extend_from_slice(&self.header_count.to_le_bytes());
        Ok(())
    }

    /// Drop rows past `rows` (rebuilding is rare, only after corruption: the kept prefix stays).
    fn truncate(&mut self, rows: usize) {
        if self.rows == rows {
            return;
        }
        let keep_headers = match self.header_offsets.get(rows * 4..rows * 4 + 4) {
            Some(end) if rows > 0 => i32::from_le_bytes(end.try_into().unwrap_or([0; 4])) as usize,
            _ => 0,
        };
        self.offset.truncate(rows * 8);
        self.timestamp.truncate(rows * 8);
        self.sequence.truncate(rows * 4);
        self.batch_index.truncate(rows * 4);
        self.header_offsets.truncate((rows + 1) * 4);
        self.key.truncate(rows);
        self.value.truncate(rows);
        self.header_key.truncate(keep_headers);
        self.header_value.truncate(keep_headers);
        self.header_count = keep_headers as i32;
        self.rows = rows;
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// How many batches were added: the next batch_index.
    pub fn batches(&self) -> i32 {
        self.batches
    }

    /// Hand the columns over and start afresh (same wanted columns): what `finish` exports
    /// without copying.
    pub fn take(&mut self) -> RecordColumns {
        std::mem::replace(self, RecordColumns::with_columns(self.wanted))
    }

    /// The buffers, moved out.
    pub fn into_parts(self) -> ColumnParts {
        let header_offsets =
            if self.header_offsets.is_empty() { 0i32.to_le_bytes().to_vec() } else { self.header_offsets };
        ColumnParts {
            rows: self.rows,
            offset: self.offset,
            timestamp: self.timestamp,
            sequence: self.sequence,
            batch_index: self.batch_index,
            key: self.key.into_parts(),
            value: self.value.into_parts(),
            header_offsets,
            header_key: self.header_key.into_parts(),
            header_value: self.header_value.into_parts(),
        }
    }
}

#[cfg(test)] // the bindings take the buffers with into_parts
impl RecordColumns {
    /// int64 LE per row.
    pub fn offset(&self) -> &[u8] {
        &self.offset
    }

    /// int64 LE per row (epoch ms).
    pub fn timestamp(&self) -> &[u8] {
        &self.timestamp
    }

    /// int32 LE per row.
    pub fn sequence(&self) -> &[u8] {
        &self.sequence
    }

    /// int32 LE per row: the index of the batch (in add order) the row came from.
    pub fn batch_index(&self) -> &[u8] {
        &self.batch_index
    }

    pub fn key(&self) -> &BinaryColumn {
        &self.key
    }

    pub fn value(&self) -> &BinaryColumn {
        &self.value
    }

    /// int32 LE list offsets, rows + 1 of them, into the header_key / header_value columns.
    pub fn header_offsets(&self) -> Vec<u8> {
        if self.header_offsets.is_empty() {
            0i32.to_le_bytes().to_vec()
        } else {
            self.header_offsets.clone()
        }
    }

    pub fn header_key(&self) -> &BinaryColumn {
        &self.header_key
    }
}
