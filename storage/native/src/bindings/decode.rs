//! Record decoders: the records of one batch into Python tuples, straight from its header.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyString, PyTuple};

use super::errors::to_py;
use super::ffi::{with_bytes, NoGc, SubclassTuples};
use super::header::BatchHeader;
use crate::codec::{self, CodecError, RecordBase, RecordView};

/// `a + b` as a Python int, exact even past 64 bits (a damaged header may hold any base).
#[inline]
pub(super) fn py_sum(py: Python<'_>, a: i64, b: i64) -> PyResult<Bound<'_, PyAny>> {
    match a.checked_add(b) {
        Some(v) => Ok(v.into_pyobject(py)?.into_any()),
        None => Ok((a as i128 + b as i128).into_pyobject(py)?.into_any()),
    }
}

fn py_opt_bytes<'py>(py: Python<'py>, b: Option<&[u8]>) -> Bound<'py, PyAny> {
    match b {
        Some(b) => PyBytes::new(py, b).into_any(),
        None => py.None().into_bound(py),
    }
}

fn py_headers<'py>(py: Python<'py>, rec: &RecordView) -> PyResult<Bound<'py, PyList>> {
    if rec.headers.is_empty() {
        return Ok(PyList::empty(py));
    }
    let items = rec
        .headers
        .iter()
        .map(|(name, value)| {
            // Java's new String(bytes, UTF_8): invalid UTF-8 becomes U+FFFD instead of failing
            let name = PyString::new(py, &String::from_utf8_lossy(name));
            PyTuple::new(py, [name.into_any(), py_opt_bytes(py, *value)])
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// offset, timestamp, key, value, headers, sequence: `storage.records.Record`'s fields.
/// `fixed_ts` is the timestamp object shared by every record of a LOG_APPEND_TIME batch.
fn record_fields<'py>(
    py: Python<'py>,
    base: &RecordBase,
    rec: &RecordView,
    fixed_ts: &Bound<'py, PyAny>,
) -> PyResult<[Bound<'py, PyAny>; 6]> {
    let timestamp = if base.use_deltas { py_sum(py, base.timestamp, rec.timestamp_delta)? } else { fixed_ts.clone() };
    Ok([
        py_sum(py, base.offset, rec.offset_delta as i64)?,
        timestamp,
        py_opt_bytes(py, rec.key),
        py_opt_bytes(py, rec.value),
        py_headers(py, rec)?.into_any(),
        base.sequence_of(rec).into_pyobject(py)?.into_any(),
    ])
}

/// The records of the batch `header` (parsed at `buf[position]`), decoded one by one into what
/// `row` makes of each (None leaves a record out): the one record loop of both decoders.
pub(super) fn collect_rows<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    position: usize,
    header: &codec::Header,
    mut row: impl FnMut(&RecordView) -> PyResult<Option<Bound<'py, PyAny>>>,
) -> PyResult<Bound<'py, PyList>> {
    let _no_gc = NoGc::new();
    with_bytes(buf, |buf| {
        let mut owned = Vec::new();
        let data = codec::records_region(buf, position, header, &mut owned).map_err(to_py)?;
        let count = header.records_count;
        let mut rows: Vec<Bound<'py, PyAny>> = Vec::with_capacity((count.max(0) as usize).min(data.len() / 7 + 1));
        let mut failure: Option<PyErr> = None;
        let outcome = codec::for_each_record(data, count, |rec| match row(&rec) {
            Ok(Some(made)) => {
                rows.push(made);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                failure = Some(e);
                Err(CodecError::Truncated)
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        outcome.map_err(to_py)?;
        PyList::new(py, rows)
    })
}

/// The records of the batch `header` (parsed at `buf[position]`) as a list of 6-tuples in
/// `Record`'s field order, or of instances of the tuple subclass `cls`.
#[pyfunction]
#[pyo3(signature = (buf, position, header, cls=None))]
pub fn decode_records<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    position: usize,
    header: &Bound<'py, BatchHeader>,
    cls: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    let header = &header.get().header;
    let base = header.record_base();
    let fixed_ts = base.timestamp.into_pyobject(py)?.into_any();
    let maker = cls.map(SubclassTuples::new).transpose()?;
    collect_rows(py, buf, position, header, |rec| {
        let fields = record_fields(py, &base, rec, &fixed_ts)?;
        Ok(Some(match &maker {
            Some(maker) => maker.make(fields)?,
            None => PyTuple::new(py, fields)?.into_any(),
        }))
    })
}

/// Like decode_records, but straight into instances of `cls` with the twelve fields a Consumer
/// hands out (txlog.consumer_record.ConsumerRecord's order), keeping only offsets in
/// [start_offset, end_offset): topic, partition, offset, timestamp, timestamp_type, key, value,
/// headers, producer_id, producer_epoch, sequence, is_transactional. The header gives the
/// producer fields and the transactional flag; `timestamp_type` is the caller's object for it.
#[pyfunction]
#[pyo3(signature = (buf, position, header, *, cls, topic, partition, timestamp_type, start_offset, end_offset))]
#[allow(clippy::too_many_arguments)] // the keyword-only fields of the record, each named at the call
pub fn decode_consumer_records<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    position: usize,
    header: &Bound<'py, BatchHeader>,
    cls: &Bound<'py, PyAny>,
    topic: &Bound<'py, PyAny>,
    partition: &Bound<'py, PyAny>,
    timestamp_type: &Bound<'py, PyAny>,
    start_offset: i64,
    end_offset: i64,
) -> PyResult<Bound<'py, PyList>> {
    let (producer_id, producer_epoch) = header.get().producer(py);
    let header = &header.get().header;
    let is_transactional = PyBool::new(py, header.is_transactional()).to_owned().into_any();
    let base = header.record_base();
    let fixed_ts = base.timestamp.into_pyobject(py)?.into_any();
    let maker = SubclassTuples::new(cls)?;
    collect_rows(py, buf, position, header, |rec| {
        let offset = base.offset_of(rec);
        if offset < start_offset as i128 || offset >= end_offset as i128 {
            return Ok(None);
        }
        let [o, t, k, v, h, s] = record_fields(py, &base, rec, &fixed_ts)?;
        Ok(Some(maker.make([
            topic.clone(),
            partition.clone(),
            o,
            t,
            timestamp_type.clone(),
            k,
            v,
            h,
            producer_id.clone(),
            producer_epoch.clone(),
            s,
            is_transactional.clone(),
        ])?))
    })
}

/// (records seen, largest timestamp delta) of the uncompressed records region
/// `buf[start:end]`, walking length varints only: the append path's framing check.
#[pyfunction]
pub fn walk_records(buf: &Bound<'_, PyAny>, start: usize, end: usize) -> PyResult<(i64, i64)> {
    with_bytes(buf, |data| codec::region(data, start, end).and_then(codec::walk_records).map_err(to_py))
}
