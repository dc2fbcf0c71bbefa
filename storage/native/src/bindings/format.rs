//! `ConsoleFormatter`: format.rs's text lines, from a poll's ConsumerRecords or straight
//! from a batch's bytes.
//!
//! `format` takes txlog.consumer_record.ConsumerRecord tuples (topic, partition, offset,
//! timestamp, timestamp_type, key, value, headers, ...): their items are read by position,
//! with no attribute lookups, and every line lands in one buffer that the CLI writes once.
//! `batch_lines` skips the ConsumerRecords: it decodes a batch's records itself and writes
//! the lines of those a fetch's walk takes into one bytes, with no object per record
//! (storage/console_format.py `batch_lines`).

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use super::decode::py_sum;
use super::errors::to_py;
use super::ffi::with_bytes;
use super::header::BatchHeader;
use crate::codec;
use crate::codec::{RecordBase, RecordView, TIMESTAMP_TYPE_MASK};
use crate::format::{
    table_rows, table_widths, ConsoleFormat, DumpFields, DumpFormat, Fields, KcatPart, RowFields, RowFormat, RowStyle,
    ValueFormat, KCAT_FIELDS,
};

// ConsumerRecord's field positions (txlog/consumer_record.py).
const PARTITION: usize = 1;
const OFFSET: usize = 2;
const TIMESTAMP: usize = 3;
const TIMESTAMP_TYPE: usize = 4;
const KEY: usize = 5;
const VALUE: usize = 6;
const HEADERS: usize = 7;

/// What `batch_lines` returns: (records written, the last one's offset or None, their lines, records
/// left, the offset of the record the stop timestamp stopped at or None).
type BatchLines<'py> = (usize, Option<Bound<'py, PyAny>>, Bound<'py, PyBytes>, bool, Option<Bound<'py, PyAny>>);

/// Kafka's console-consumer formatter with fixed options (cli/consume.py's `_KafkaFormatter`).
#[pyclass(frozen, module = "storage._native")]
pub struct ConsoleFormatter {
    format: ConsoleFormat,
    /// The Kafka names of the timestamp types, indexed by a record's timestamp_type.
    timestamp_kinds: Vec<Vec<u8>>,
}

#[pymethods]
impl ConsoleFormatter {
    #[new]
    #[pyo3(signature = (*, flags, key_separator, line_separator, headers_separator, null_literal, value_format, timestamp_kinds, iso_timestamps=false))]
    #[allow(clippy::too_many_arguments)] // the formatter's properties, each named at the call
    fn new(
        flags: (bool, bool, bool, bool, bool, bool),
        key_separator: Vec<u8>,
        line_separator: Vec<u8>,
        headers_separator: Vec<u8>,
        null_literal: Vec<u8>,
        value_format: &str,
        timestamp_kinds: Vec<String>,
        iso_timestamps: bool,
    ) -> PyResult<Self> {
        let (print_timestamp, print_partition, print_offset, print_headers, print_key, print_value) = flags;
        let value_format = ValueFormat::parse(value_format)
            .ok_or_else(|| PyValueError::new_err(format!("unknown value format {value_format:?}")))?;
        Ok(ConsoleFormatter {
            format: ConsoleFormat {
                print_timestamp,
                print_partition,
                print_offset,
                print_headers,
                print_key,
                print_value,
                key_separator,
                line_separator,
                headers_separator,
                null_literal,
                value_format,
                iso_timestamps,
            },
            timestamp_kinds: timestamp_kinds.into_iter().map(String::into_bytes).collect(),
        })
    }

    /// Every record's line, each followed by the line separator, as one bytes.
    fn format<'py>(&self, py: Python<'py>, records: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::with_capacity(records.len() * 128);
        for record in records.iter() {
            let record = record.cast_into::<PyTuple>()?;
            let key = record.get_item(KEY)?;
            let value = record.get_item(VALUE)?;
            let header_items = if self.format.print_headers { header_items(&record)? } else { Vec::new() };
            let mut headers: Vec<(&[u8], Option<&[u8]>)> = Vec::with_capacity(header_items.len());
            for (name, value) in &header_items {
                headers.push((name.to_str()?.as_bytes(), optional_bytes(value)?));
            }
            let timestamp_kind = if self.format.print_timestamp {
                self.timestamp_kind(record.get_item(TIMESTAMP_TYPE)?.extract()?)?
            } else {
                &[]
            };
            let fields = Fields {
                timestamp_kind,
                timestamp: if self.format.print_timestamp { record.get_item(TIMESTAMP)?.extract()? } else { 0 },
                partition: if self.format.print_partition { record.get_item(PARTITION)?.extract()? } else { 0 },
                offset: if self.format.print_offset { record.get_item(OFFSET)?.extract()? } else { 0 },
                key: if self.format.print_key { optional_bytes(&key)? } else { None },
                value: if self.format.print_value { optional_bytes(&value)? } else { None },
                headers: &headers,
            };
            self.format.write(&mut out, &fields);
        }
        Ok(PyBytes::new(py, &out))
    }

    /// The lines of the batch `header`'s records (parsed at `buf[position]`) at offsets in
    /// [start_offset, end_offset), the first `limit` of them, back to back in one bytes, each
    /// ending with the line separator: what `format` writes for the ConsumerRecords of the same
    /// records, with no object per record. With `stop_timestamp` (kcat's `-o e@MS`) the lines end
    /// before the first of those records whose timestamp is at or past it. Returns (records
    /// written, the offset of the last one or None, the bytes, whether records in the range were
    /// left, the offset of the record the stop timestamp stopped at or None). Every record is
    /// decoded (and a batch that cannot be is refused) however many are written, as the
    /// ConsumerRecord decoders do.
    #[pyo3(signature = (buf, position, header, *, partition, start_offset, end_offset, limit, stop_timestamp=None))]
    #[allow(clippy::too_many_arguments)] // the batch, then the keyword-only fields of its records
    fn batch_lines<'py>(
        &self,
        py: Python<'py>,
        buf: &Bound<'py, PyAny>,
        position: usize,
        header: &Bound<'py, BatchHeader>,
        partition: i64,
        start_offset: i64,
        end_offset: i64,
        limit: usize,
        stop_timestamp: Option<i64>,
    ) -> PyResult<BatchLines<'py>> {
        let batch = &header.get().header;
        let kind = self.timestamp_kind(i64::from(batch.attributes & TIMESTAMP_TYPE_MASK != 0))?;
        let range = LineRange { start_offset, end_offset, limit, stop_timestamp };
        lines_of_batch(py, buf, position, header, range, |out, base, rec| {
            self.write_record(out, kind, base, partition, rec)
        })
    }

    /// The lines (item 1) of `lines`' (offset, line) tuples, as one bytes. An item repeated (the
    /// same object, one after the other) is written once: a reader that keeps one item per record
    /// lists the bytes `batch_lines` made for a batch once for each of its records.
    #[staticmethod]
    fn join<'py>(py: Python<'py>, lines: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyBytes>> {
        // The distinct items' lines, then one copy of them into the bytes returned (a poll's
        // output is its records' bytes: one buffer, copied once).
        let mut parts = distinct_lines(py, lines)?;
        if parts.len() == 1 {
            return Ok(parts.swap_remove(0));
        }
        let size = parts.iter().map(|part| part.as_bytes().len()).sum();
        PyBytes::new_with(py, size, |out| {
            let mut at = 0;
            for part in &parts {
                let bytes = part.as_bytes();
                out[at..at + bytes.len()].copy_from_slice(bytes);
                at += bytes.len();
            }
            Ok(())
        })
    }

    /// What `join` joins, as a list of the distinct items' lines in order, for a writer that writes
    /// them one after the other: no bytes of the whole poll made (and zeroed, and copied into) only
    /// to be written once and dropped.
    #[staticmethod]
    fn parts<'py>(py: Python<'py>, lines: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, distinct_lines(py, lines)?)
    }
}

/// The line (item 1) of each distinct item of `lines`, in order: an item repeated back to back (the
/// same object) is taken once.
fn distinct_lines<'py>(py: Python<'py>, lines: &Bound<'py, PyList>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let mut parts: Vec<Bound<'py, PyBytes>> = Vec::new();
    let mut previous = std::ptr::null_mut();
    for index in 0..lines.len() {
        // SAFETY: `lines` is a live list and the GIL is held; PyList_GetItem returns a borrowed
        // reference (or NULL with IndexError set, were the list shortened meanwhile).
        let item = unsafe { pyo3::ffi::PyList_GetItem(lines.as_ptr(), index as pyo3::ffi::Py_ssize_t) };
        if item.is_null() {
            return Err(PyErr::fetch(py));
        }
        if item == previous {
            continue; // the same item again, by identity: one per record of the lines it holds
        }
        previous = item;
        // SAFETY: `item` is a borrowed reference, alive while the list holds it.
        let item = unsafe { Borrowed::from_ptr(py, item) };
        parts.push(item.cast::<PyTuple>()?.get_item(1)?.cast_into::<PyBytes>()?);
    }
    Ok(parts)
}

impl ConsoleFormatter {
    /// One record's line, with the line separator, appended to `out`: what `format` writes for
    /// the record's ConsumerRecord (`base` is its batch's, `kind` its timestamp type's name).
    fn write_record(&self, out: &mut Vec<u8>, kind: &[u8], base: &RecordBase, partition: i64, rec: &RecordView) {
        let timestamp = record_timestamp(base, rec);
        // Headers are looked at only where printed: two vectors per record with headers otherwise.
        let names = if self.format.print_headers { header_names(rec) } else { Vec::new() };
        let headers: Vec<(&[u8], Option<&[u8]>)> =
            names.iter().zip(&rec.headers).map(|(name, (_, value))| (name.as_bytes(), *value)).collect();
        let fields = Fields {
            timestamp_kind: kind,
            timestamp,
            partition,
            offset: base.offset_of(rec),
            key: rec.key,
            value: rec.value,
            headers: &headers,
        };
        self.format.write(out, &fields);
    }

    /// The name of a timestamp type, indexed as a Python sequence is (negative from the end).
    fn timestamp_kind(&self, index: i64) -> PyResult<&[u8]> {
        let len = self.timestamp_kinds.len() as i64;
        let at = if index < 0 { index + len } else { index };
        if !(0..len).contains(&at) {
            return Err(PyIndexError::new_err("timestamp type out of range"));
        }
        Ok(&self.timestamp_kinds[at as usize])
    }
}

/// Which records of a batch `batch_lines` writes: offsets in [start_offset, end_offset), at most
/// `limit`, and none from the first whose timestamp is at or past `stop_timestamp` on (kcat's e@MS).
#[derive(Clone, Copy)]
struct LineRange {
    start_offset: i64,
    end_offset: i64,
    limit: usize,
    stop_timestamp: Option<i64>,
}

/// The walk of both formatters' `batch_lines`: every record of the batch `header` (parsed at
/// `buf[position]`) decoded (a batch that cannot be is refused, as the ConsumerRecord decoders
/// refuse it), and `write` called for those in `range`, into one bytes. Returns (records written,
/// the offset of the last one or None, the bytes, whether records in the range were left past
/// the limit or the stop, the offset of the record the stop timestamp stopped at or None). The
/// limit is looked at first: a record past it is the next fetch's, stop or not (as cli/consume.py
/// `_before` sees only what a poll returned).
fn lines_of_batch<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    position: usize,
    header: &Bound<'py, BatchHeader>,
    range: LineRange,
    mut write: impl FnMut(&mut Vec<u8>, &RecordBase, &RecordView),
) -> PyResult<BatchLines<'py>> {
    let header = &header.get().header;
    let base = header.record_base();
    let mut out = Vec::new();
    let (mut count, mut last_delta, mut more, mut stopped) = (0usize, None, false, None);
    with_bytes(buf, |buf| {
        let mut owned = Vec::new();
        let data = codec::records_region(buf, position, header, &mut owned).map_err(to_py)?;
        out.reserve(data.len()); // about the lines' size (a record's value, plus framing): few regrowths
        codec::for_each_record(data, header.records_count, |rec| {
            let offset = base.offset_of(&rec);
            if offset < range.start_offset as i128 || offset >= range.end_offset as i128 {
                return Ok(());
            }
            if more {
                return Ok(()); // past the limit or the stop: decoded (checked), not written
            }
            if count >= range.limit {
                more = true;
                return Ok(());
            }
            if range.stop_timestamp.is_some_and(|stop| record_timestamp(&base, &rec) >= stop as i128) {
                (more, stopped) = (true, Some(rec.offset_delta));
                return Ok(());
            }
            write(&mut out, &base, &rec);
            count += 1;
            last_delta = Some(rec.offset_delta);
            Ok(())
        })
        .map_err(to_py)
    })?;
    let last = last_delta.map(|delta| py_sum(py, base.offset, delta as i64)).transpose()?;
    let stopped = stopped.map(|delta| py_sum(py, base.offset, delta as i64)).transpose()?;
    Ok((count, last, PyBytes::new(py, &out), more, stopped))
}

/// A record's timestamp: the batch's base plus the record's delta, or the batch's own (LogAppendTime).
fn record_timestamp(base: &RecordBase, rec: &RecordView) -> i128 {
    if base.use_deltas {
        base.timestamp as i128 + rec.timestamp_delta as i128
    } else {
        base.timestamp as i128
    }
}

/// Header names as a decoded record has them: Java's String(bytes, UTF_8), U+FFFD for bad bytes.
fn header_names<'a>(rec: &RecordView<'a>) -> Vec<std::borrow::Cow<'a, str>> {
    rec.headers.iter().map(|(name, _)| String::from_utf8_lossy(name)).collect()
}

/// `txlog consume --output jsonl|json|csv|table`'s rows (format.rs `RowFormat`) straight from
/// a batch's bytes; `replaced` says whether some key or value was not UTF-8 (for the CLI's note).
#[pyclass(frozen, module = "storage._native")]
pub struct RowFormatter {
    format: RowFormat,
    replaced: AtomicBool,
}

#[pymethods]
impl RowFormatter {
    #[new]
    #[pyo3(signature = (*, output, topic, value_format, csv_quoted, iso_timestamps=false, kcat_parts=Vec::new(), broker=0))]
    #[allow(clippy::too_many_arguments)] // keyword-only: each output takes the ones it needs
    fn new(
        output: &str,
        topic: String,
        value_format: &str,
        csv_quoted: Vec<u8>,
        iso_timestamps: bool,
        kcat_parts: Vec<Bound<'_, PyAny>>,
        broker: i64,
    ) -> PyResult<Self> {
        let value_format = ValueFormat::parse(value_format)
            .ok_or_else(|| PyValueError::new_err(format!("unknown value format {value_format:?}")))?;
        let style = match output {
            "jsonl" => RowStyle::Jsonl,
            "json" => RowStyle::Json,
            "csv" => RowStyle::Csv { quoted: csv_quoted },
            "table" => RowStyle::Table,
            "kcat_json" => RowStyle::KcatJson { broker },
            "kcat" => RowStyle::Kcat { parts: kcat_parts.iter().map(kcat_part).collect::<PyResult<_>>()? },
            _ => return Err(PyValueError::new_err(format!("unknown row output {output:?}"))),
        };
        let format = RowFormat { style, value_format, topic, iso_timestamps };
        Ok(RowFormatter { format, replaced: AtomicBool::new(false) })
    }

    /// Whether some key or value written so far was not UTF-8 (shown with U+FFFD).
    #[getter]
    fn replaced(&self) -> bool {
        self.replaced.load(Ordering::Relaxed)
    }

    /// `ConsoleFormatter.batch_lines` with this formatter's rows for lines.
    #[pyo3(signature = (buf, position, header, *, partition, start_offset, end_offset, limit, stop_timestamp=None))]
    #[allow(clippy::too_many_arguments)] // the batch, then the keyword-only fields of its records
    fn batch_lines<'py>(
        &self,
        py: Python<'py>,
        buf: &Bound<'py, PyAny>,
        position: usize,
        header: &Bound<'py, BatchHeader>,
        partition: i64,
        start_offset: i64,
        end_offset: i64,
        limit: usize,
        stop_timestamp: Option<i64>,
    ) -> PyResult<BatchLines<'py>> {
        let range = LineRange { start_offset, end_offset, limit, stop_timestamp };
        let mut scratch = Vec::new();
        let mut replaced = false;
        let lines = lines_of_batch(py, buf, position, header, range, |out, base, rec| {
            let names = header_names(rec);
            let headers: Vec<(&[u8], Option<&[u8]>)> =
                names.iter().zip(&rec.headers).map(|(name, (_, value))| (name.as_bytes(), *value)).collect();
            let fields = RowFields {
                timestamp: record_timestamp(base, rec),
                log_append_time: !base.use_deltas,
                partition,
                offset: base.offset_of(rec),
                key: rec.key,
                value: rec.value,
                headers: &headers,
            };
            replaced |= self.format.write(out, &fields, &mut scratch);
        })?;
        if replaced {
            self.replaced.store(true, Ordering::Relaxed);
        }
        Ok(lines)
    }
}

/// One part of a kcat `-f` format as cli/consume.py `_KcatFormatter` parsed it: bytes are
/// literal text, a str the letter of a field.
fn kcat_part(part: &Bound<'_, PyAny>) -> PyResult<KcatPart> {
    if let Ok(text) = part.cast::<PyBytes>() {
        return Ok(KcatPart::Literal(text.as_bytes().to_vec()));
    }
    let letter = part.extract::<String>()?;
    match letter.as_bytes() {
        [field] if KCAT_FIELDS.contains(field) => Ok(KcatPart::Field(*field)),
        _ => Err(PyValueError::new_err(format!("unknown kcat field {letter:?}"))),
    }
}

/// A record's headers as (name, value) items: a list of 2-tuples of str and bytes-or-None.
fn header_items<'py>(record: &Bound<'py, PyTuple>) -> PyResult<Vec<(Bound<'py, PyString>, Bound<'py, PyAny>)>> {
    let headers = record.get_item(HEADERS)?;
    let mut items = Vec::new();
    for item in headers.try_iter()? {
        let (name, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item?.extract()?;
        let name = name.cast_into::<PyString>().map_err(|_| PyTypeError::new_err("a header name must be a str"))?;
        items.push((name, value));
    }
    Ok(items)
}

/// A key, value or header value: bytes or None.
fn optional_bytes<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<Option<&'a [u8]>> {
    if obj.is_none() {
        return Ok(None);
    }
    let bytes = obj.cast::<PyBytes>().map_err(|_| PyTypeError::new_err("a key or value must be bytes or None"))?;
    Ok(Some(bytes.as_bytes()))
}

/// kafka-dump-log's record lines of the data batch `header` (parsed at `buf[position]`),
/// newline-separated, or None where cli/dump_log.py must format the batch itself: a record
/// whose key or value is not UTF-8 (under `print_data`), no records, or records that cannot
/// be decoded (the Python path raises the reader's error for them).
#[pyfunction]
#[pyo3(signature = (buf, position, header, *, skip_metadata, print_data))]
pub fn dump_record_lines<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    position: usize,
    header: &Bound<'py, BatchHeader>,
    skip_metadata: bool,
    print_data: bool,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let header = &header.get().header;
    let kind: &[u8] = if header.attributes & TIMESTAMP_TYPE_MASK != 0 { b"LogAppendTime" } else { b"CreateTime" };
    let base = header.record_base();
    let format = DumpFormat { skip_metadata, print_data };
    let lines = with_bytes(buf, |buf| {
        let mut owned = Vec::new();
        let Ok(data) = codec::records_region(buf, position, header, &mut owned) else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(data.len() * 2);
        let mut shown = true;
        let mut count = 0usize;
        let walked = codec::for_each_record(data, header.records_count, |rec| {
            if !shown {
                return Ok(());
            }
            if count > 0 {
                out.push(b'\n');
            }
            count += 1;
            let names = header_names(&rec);
            let names: Vec<&[u8]> = names.iter().map(|name| name.as_bytes()).collect();
            let timestamp = record_timestamp(&base, &rec);
            let fields = DumpFields {
                offset: base.offset_of(&rec),
                timestamp_kind: kind,
                timestamp,
                sequence: base.sequence_of(&rec),
                key: rec.key,
                value: rec.value,
                header_names: &names,
            };
            shown = format.write(&mut out, &fields);
            Ok(())
        });
        Ok((walked.is_ok() && shown && count > 0).then_some(out))
    })?;
    Ok(lines.map(|out| PyBytes::new(py, &out)))
}

/// The column widths `widths` widened to the whole rows at the start of `data` (a table
/// `RowFormatter`'s lines, back to back), the bytes of those rows, and whether every cell of
/// them is one `table_lines` can lay out (printable ASCII); where one is not, only tabulate
/// can lay the table out.
#[pyfunction]
pub fn table_widths_of(data: &[u8], mut widths: Vec<usize>) -> (Vec<usize>, usize, bool) {
    let (read, simple) = table_widths(data, &mut widths);
    (widths, read, simple)
}

/// The "simple" table lines (tabulate's layout, cli/output.py `render_table`) of the whole rows
/// at the start of `data`, every cell padded to `widths`, each line ending with a newline;
/// and the bytes of those rows. Only for rows `table_widths_of` found simple.
#[pyfunction]
pub fn table_lines<'py>(py: Python<'py>, data: &[u8], widths: Vec<usize>) -> (Bound<'py, PyBytes>, usize) {
    let mut out = Vec::with_capacity(data.len() * 2);
    let read = table_rows(&mut out, data, &widths);
    (PyBytes::new(py, &out), read)
}
