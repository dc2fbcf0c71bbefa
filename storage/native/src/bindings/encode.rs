//! Batch encoders: one whole batch from record columns (build_batch, control batches), the
//! producer's bulk path (encoder.rs: many batches from columns, split as BatchBuilder splits),
//! and the send-time stamp of a built batch's producer fields.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyString};

use super::errors::to_py;
use super::ffi::{type_name, with_bytes, with_bytes_mut, SubclassTuples, DETACH_BYTES};
use crate::codec::{self, CodecError as Error};
use crate::{compression, encoder, retain};

/// Collects the byte views of one column item: bytes borrow without a copy, other buffers
/// (bytearray, memoryview) are copied once.
enum Item<'py> {
    Null,
    Bytes(Bound<'py, PyBytes>),
    Owned(Vec<u8>),
}

impl Item<'_> {
    fn get(&self) -> Option<&[u8]> {
        match self {
            Item::Null => None,
            Item::Bytes(b) => Some(b.as_bytes()),
            Item::Owned(v) => Some(v.as_slice()),
        }
    }
}

fn item<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Item<'py>> {
    if obj.is_none() {
        return Ok(Item::Null);
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Item::Bytes(b.clone()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        if what == "header key" {
            return Ok(Item::Owned(s.to_str()?.as_bytes().to_vec()));
        }
    }
    with_bytes(obj, |d| Ok(Item::Owned(d.to_vec())))
        .map_err(|_| PyTypeError::new_err(format!("{what} must be bytes-like or None, not {}", type_name(obj))))
}

/// One whole batch from record columns: keys, values (bytes-like or None), headers (None or
/// a sequence of (str | bytes, bytes | None)), timestamps (ints, already defaulted),
/// compressed per `attributes & 7`, with the CRC.
#[pyfunction]
#[pyo3(signature = (keys, values, headers, timestamps, *, base_offset, partition_leader_epoch, attributes,
                    base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence))]
#[allow(clippy::too_many_arguments)] // the header fields are keyword-only, each named at the call
pub fn encode_batch<'py>(
    py: Python<'py>,
    keys: &Bound<'py, PyAny>,
    values: &Bound<'py, PyAny>,
    headers: &Bound<'py, PyAny>,
    timestamps: &Bound<'py, PyAny>,
    base_offset: i64,
    partition_leader_epoch: i32,
    attributes: i16,
    base_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> PyResult<Bound<'py, PyBytes>> {
    let keys: Vec<Item> = keys.try_iter()?.map(|k| item(&k?, "key")).collect::<PyResult<_>>()?;
    let values: Vec<Item> = values.try_iter()?.map(|v| item(&v?, "value")).collect::<PyResult<_>>()?;
    let timestamps: Vec<i64> = timestamps.try_iter()?.map(|t| t?.extract::<i64>()).collect::<PyResult<_>>()?;
    let mut header_items: Vec<Vec<(Item, Item)>> = Vec::with_capacity(keys.len());
    for hs in headers.try_iter()? {
        let hs = hs?;
        let mut pairs = Vec::new();
        if !hs.is_none() {
            for pair in hs.try_iter()? {
                let pair = pair?;
                // any 2-item sequence, as Python's `for name, value in headers` unpacks it
                let items = pair.try_iter()?.collect::<PyResult<Vec<_>>>()?;
                let [name, value]: [Bound<PyAny>; 2] =
                    items.try_into().map_err(|_| PyValueError::new_err("a header must be a (key, value) pair"))?;
                let name = item(&name, "header key")?;
                if matches!(name, Item::Null) {
                    return Err(PyTypeError::new_err("a header key cannot be None"));
                }
                pairs.push((name, item(&value, "header value")?));
            }
        }
        header_items.push(pairs);
    }
    let n = keys.len();
    if values.len() != n || timestamps.len() != n || header_items.len() != n {
        return Err(PyValueError::new_err("keys, values, headers and timestamps differ in length"));
    }
    if n == 0 {
        return Err(PyValueError::new_err("a batch needs at least one record"));
    }
    let records: Vec<codec::RecordIn> = (0..n)
        .map(|i| codec::RecordIn {
            key: keys[i].get(),
            value: values[i].get(),
            headers: header_items[i].iter().map(|(k, v)| (k.get().unwrap_or(&[]), v.get())).collect(),
            timestamp: timestamps[i],
        })
        .collect();
    let fields = codec::BatchFields {
        base_offset,
        partition_leader_epoch,
        attributes,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
    };
    let codec_id = (attributes & 0x07) as u8;
    let out = (|| {
        let mut payload = Vec::with_capacity(n * 32);
        codec::encode_records(&mut payload, &records, base_timestamp)?;
        if codec_id != compression::NONE {
            payload = compression::compress(codec_id, &payload)?;
        }
        codec::assemble(&payload, n, &fields)
    })()
    .map_err(to_py)?;
    Ok(PyBytes::new(py, &out))
}

// --- the producer's bulk path (encoder.rs) ---------------------------------------------------

/// A record column read in one pass: every item's bytes as a slice. bytes and str (its
/// cached UTF-8) are borrowed without a copy, their objects kept alive by `keep` (strong
/// references); other buffers (bytearray, memoryview) are copied once into `owned`, so a
/// caller mutating them while the encoder runs without the GIL cannot tear a batch.
/// One pass matters: for 200k records, every extra walk over the objects is a cache miss
/// per object.
struct Column<'py> {
    keep: Vec<Bound<'py, PyAny>>,
    owned: Vec<Box<[u8]>>,
    /// 'static stands for "as long as this Column": see `views`.
    items: Vec<Option<&'static [u8]>>,
}

impl<'py> Column<'py> {
    fn new() -> Self {
        Column { keep: Vec::new(), owned: Vec::new(), items: Vec::new() }
    }

    /// The items, borrowed no longer than the Column that keeps their memory alive.
    fn views(&self) -> &[Option<&[u8]>] {
        &self.items
    }

    /// Add `obj`; `what` and `index` name it in the TypeError for anything else.
    fn push(&mut self, obj: Bound<'py, PyAny>, what: &str, index: usize) -> PyResult<()> {
        let view: Option<&[u8]> = if obj.is_none() {
            None
        } else if let Ok(b) = obj.cast::<PyBytes>() {
            Some(b.as_bytes())
        } else if let Ok(s) = obj.cast::<PyString>() {
            Some(s.to_str()?.as_bytes())
        } else {
            let copy: Box<[u8]> = with_bytes(&obj, |d| Ok(d.into())).map_err(|_| {
                PyTypeError::new_err(format!(
                    "{what} at index {index} must be bytes, bytearray, memoryview, str or None, not {}",
                    type_name(&obj)
                ))
            })?;
            // SAFETY: a boxed slice's heap memory never moves; `owned` keeps it until the
            // Column drops, and no slice outlives the Column (`views` borrows it).
            let view = unsafe { std::slice::from_raw_parts(copy.as_ptr(), copy.len()) };
            self.owned.push(copy);
            self.items.push(Some(view));
            return Ok(());
        };
        // SAFETY: the slice points into an immutable bytes object or a str's cached UTF-8,
        // both freed only with their object; `keep` holds a strong reference to it until the
        // Column drops, and no slice outlives the Column (`views` borrows it).
        self.items.push(view.map(|v| unsafe { std::slice::from_raw_parts(v.as_ptr(), v.len()) }));
        if view.is_some() {
            self.keep.push(obj);
        }
        Ok(())
    }
}

fn read_column<'py>(column: &Bound<'py, PyAny>, what: &str) -> PyResult<Column<'py>> {
    let mut out = Column::new();
    // a list's or tuple's length up front: growing 200k-item vectors by doubling would
    // touch (and page-fault) about twice the memory
    let hint = column.len().unwrap_or(0);
    out.items.reserve(hint);
    out.keep.reserve(hint);
    for (index, item) in column.try_iter()?.enumerate() {
        out.push(item?, what, index)?;
    }
    Ok(out)
}

/// Every record's headers (None or an iterable of (name, value) pairs) flattened: names and
/// values as two columns, pairs end to end, and where each record's pairs end.
struct HeaderColumns<'py> {
    names: Column<'py>,
    values: Column<'py>,
    ends: Vec<usize>,
}

impl HeaderColumns<'_> {
    fn views(&self) -> Vec<codec::HeaderIn<'_>> {
        self.names.views().iter().zip(self.values.views()).map(|(n, v)| (n.unwrap_or_default(), *v)).collect()
    }
}

fn read_headers<'py>(column: &Bound<'py, PyAny>) -> PyResult<HeaderColumns<'py>> {
    let mut out = HeaderColumns { names: Column::new(), values: Column::new(), ends: Vec::new() };
    for (index, record_headers) in column.try_iter()?.enumerate() {
        let record_headers = record_headers?;
        if !record_headers.is_none() {
            for pair in record_headers.try_iter()? {
                // any 2-item iterable, as Python's `for name, value in headers` unpacks it
                let items = pair?.try_iter()?.collect::<PyResult<Vec<_>>>()?;
                let [name, value]: [Bound<PyAny>; 2] = items.try_into().map_err(|_| {
                    PyValueError::new_err(format!("header of the record at index {index} must be a (key, value) pair"))
                })?;
                if name.is_none() {
                    return Err(PyTypeError::new_err(format!(
                        "header key of the record at index {index} cannot be None"
                    )));
                }
                out.names.push(name, "header key of the record", index)?;
                out.values.push(value, "header value of the record", index)?;
            }
        }
        out.ends.push(out.names.items.len());
    }
    Ok(out)
}

fn timestamps_column(column: Option<&Bound<'_, PyAny>>, now_ms: i64) -> PyResult<encoder::Timestamps> {
    let Some(column) = column else {
        return Ok(encoder::Timestamps::All(now_ms));
    };
    let mut out = Vec::new();
    for (index, ts) in column.try_iter()?.enumerate() {
        let ts = ts?;
        out.push(if ts.is_none() {
            now_ms
        } else {
            ts.extract::<i64>().map_err(|e| {
                if e.is_instance_of::<PyOverflowError>(ts.py()) {
                    PyValueError::new_err(format!("timestamp at index {index} is out of int64 range"))
                } else {
                    PyTypeError::new_err(format!(
                        "timestamp at index {index} must be an int or None, not {}",
                        type_name(&ts)
                    ))
                }
            })?
        });
    }
    Ok(encoder::Timestamps::Each(out))
}

/// Whole batches from record columns, split as BatchBuilder splits (encoder::plan), as
/// instances of the tuple subclass `cls` with fields (data: bytearray, record_count,
/// max_timestamp). `timestamps` None, or a None in it, means `now_ms`.
///
/// Columns are read first (timestamps last: extracting an int may run Python code, which
/// could mutate a column - harmless, since every borrowed item is held by a strong
/// reference). Uncompressed batches are encoded straight into their final bytearrays, sized
/// from the plan's exact sizes: taken from the end of `buffers` (the producer's buffer pool,
/// Kafka's BufferPool: a reused buffer's pages are already mapped, where a fresh one's first
/// touch page-faults) while it has some, else new; past DETACH_BYTES the encoding runs
/// without the GIL.
#[pyfunction]
#[pyo3(signature = (values, keys, headers, timestamps, *, max_bytes, codec, is_transactional, now_ms, cls, buffers=None))]
#[allow(clippy::too_many_arguments)] // the options are keyword-only, each named at the call
pub fn encode_batches<'py>(
    py: Python<'py>,
    values: &Bound<'py, PyAny>,
    keys: Option<&Bound<'py, PyAny>>,
    headers: Option<&Bound<'py, PyAny>>,
    timestamps: Option<&Bound<'py, PyAny>>,
    max_bytes: i64,
    codec: u8,
    is_transactional: bool,
    now_ms: i64,
    cls: &Bound<'py, PyAny>,
    buffers: Option<&Bound<'py, PyList>>,
) -> PyResult<Bound<'py, PyList>> {
    let maker = SubclassTuples::new(cls)?;
    let value_column = read_column(values, "value")?;
    let key_column = keys.map(|k| read_column(k, "key")).transpose()?;
    let header_columns = headers.map(read_headers).transpose()?;
    let header_views = header_columns.as_ref().map(HeaderColumns::views).unwrap_or_default();
    let cols = encoder::Columns {
        values: value_column.views(),
        keys: key_column.as_ref().map(Column::views),
        headers: &header_views,
        header_ends: header_columns.as_ref().map(|h| h.ends.as_slice()),
        timestamps: timestamps_column(timestamps, now_ms)?,
    };
    let opts = encoder::EncodeOptions { max_bytes, codec, is_transactional };
    let spans = encoder::plan(&cols, &opts).map_err(to_py)?;
    let detach = spans.iter().map(|s| s.size).sum::<usize>() >= DETACH_BYTES;
    let datas: Vec<Bound<'py, PyByteArray>> = if codec == compression::NONE {
        let arrays = spans.iter().map(|span| batch_array(py, buffers, span.size)).collect::<PyResult<Vec<_>>>()?;
        // SAFETY: each bytearray was created here or taken out of `buffers` with no other
        // reference left (batch_array), so it is referenced only by `arrays`: no Python code
        // can reach it, so nothing resizes or frees it; it is `span.size` long. The slices are
        // dropped before `arrays` is handed out.
        let mut outs: Vec<&mut [u8]> =
            arrays.iter().map(|a| unsafe { std::slice::from_raw_parts_mut(a.data(), a.len()) }).collect();
        let fill = |outs: &mut [&mut [u8]]| -> Result<(), Error> {
            outs.iter_mut()
                .zip(&spans)
                .try_for_each(|(out, span)| encoder::encode_uncompressed(&cols, span, &opts, out))
        };
        if detach { py.detach(|| fill(&mut outs)) } else { fill(&mut outs) }.map_err(to_py)?;
        drop(outs);
        arrays
    } else {
        let build = || -> Result<Vec<Vec<u8>>, Error> {
            let mut scratch = Vec::new();
            spans.iter().map(|span| encoder::encode_compressed(&cols, span, &opts, &mut scratch)).collect()
        };
        let batches = if detach { py.detach(build) } else { build() }.map_err(to_py)?;
        batches.iter().map(|b| PyByteArray::new(py, b)).collect()
    };
    let items = datas
        .into_iter()
        .zip(&spans)
        .map(|(data, span)| {
            maker.make([
                data.into_any(),
                span.record_count().into_pyobject(py)?.into_any(),
                span.max_timestamp.into_pyobject(py)?.into_any(),
            ])
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// A bytearray of `size` bytes for one batch: the last of `spare` that nothing else refers to
/// (each one looked at is taken out of the list; one still referenced elsewhere, by a caller's
/// mistake, is dropped rather than written while someone may read it), else a new one.
fn batch_array<'py>(
    py: Python<'py>,
    spare: Option<&Bound<'py, PyList>>,
    size: usize,
) -> PyResult<Bound<'py, PyByteArray>> {
    while let Some(list) = spare.filter(|l| !l.is_empty()) {
        let last = list.len() - 1;
        let item = list.get_item(last)?;
        list.del_item(last)?;
        if let Ok(array) = item.cast_into_exact::<PyByteArray>() {
            if array.get_refcnt() == 1 {
                array.resize(size)?;
                return Ok(array);
            }
        }
    }
    let array = PyByteArray::new(py, &[]);
    array.resize(size)?;
    Ok(array)
}

/// Patch producer id, epoch and base sequence of the one batch in `data` in place and update
/// its CRC for the change (encoder::stamp); CodecError if `data` does not start with a batch
/// header, ValueError if it holds more or less than that one batch.
#[pyfunction]
pub fn stamp_batch(data: &Bound<'_, PyAny>, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> PyResult<()> {
    with_bytes_mut(data, |d| encoder::stamp(d, producer_id, producer_epoch, base_sequence).map_err(to_py))
}

/// The leader's stamp on the batch at `out[at]`, in place (codec::stamp_offset): its base
/// offset, its partition leader epoch unless None, and its maxTimestamp unless None or the
/// header's, the CRC recomputed then. CodecError if `out` holds no header (or, for a
/// maxTimestamp to set, not the whole batch) at `at`.
#[pyfunction]
#[pyo3(signature = (out, at, base_offset, partition_leader_epoch=None, max_timestamp=None))]
pub fn stamp_offset(
    out: &Bound<'_, PyAny>,
    at: usize,
    base_offset: i64,
    partition_leader_epoch: Option<i32>,
    max_timestamp: Option<i64>,
) -> PyResult<()> {
    with_bytes_mut(out, |d| {
        codec::stamp_offset(d, at, base_offset, partition_leader_epoch, max_timestamp).map_err(to_py)
    })
}

/// The batch at `buf[position]` rebuilt with the records whose byte in `keep` is non-zero
/// (retain::retain: the log cleaner's re-encoding, offsets and producer fields kept; with no
/// record kept, Kafka's empty header). `delete_horizon` sets the KIP-534 bit and base
/// timestamp. CodecError for damaged records, ValueError for a mask of the wrong length.
/// A batch past DETACH_BYTES is rebuilt without the GIL (its inflate and compress are the cost).
#[pyfunction]
#[pyo3(signature = (buf, position, keep, delete_horizon=None))]
pub fn retain_records<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    position: usize,
    keep: &Bound<'py, PyAny>,
    delete_horizon: Option<i64>,
) -> PyResult<Bound<'py, PyBytes>> {
    let out = with_bytes(buf, |b| {
        with_bytes(keep, |k| {
            let size = codec::parse_header(b, position, false).map_or(0, |h| h.size());
            let rebuild = || retain::retain(b, position, k, delete_horizon);
            if size >= DETACH_BYTES { py.detach(rebuild) } else { rebuild() }.map_err(to_py)
        })
    })?;
    Ok(PyBytes::new(py, &out))
}
