//! `storage._native`: the per-record loops of txlog's record codec, as a Python extension.
//!
//! Orchestration stays in Python (storage/records.py wraps every function here and turns
//! `CodecError` into the typed errors of storage/errors.py, naming the file and the byte);
//! the parsing and encoding itself is safe Rust in codec.rs, compression.rs, encoder.rs and
//! batch_builder.rs (the producer's per-record builder, storage.records.BatchBuilder).
//! `unsafe` is confined to the FFI edge, never parsing: `with_bytes` / `with_bytes_mut` view a
//! Python buffer as a byte slice while the buffer is held, `Column` borrows the bytes of column
//! items it holds strong references to, `encode_batches` fills bytearrays it just created,
//! batch_builder.rs's `Held` views a buffer it holds for one append,
//! `SubclassTuples` fills NamedTuples as tuple.__new__ does, and `NoGc` switches the cyclic
//! collector off during a decode.
//! A panic in here would become a Python `PanicException` (PyO3 catches it at the FFI
//! boundary), but the proptests in tests.rs check that no input makes the codec panic.

mod batch_builder;
mod codec;
mod compression;
mod encoder;
#[cfg(test)]
mod tests;

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple};

use codec::{CodecError as Error, RecordView};

create_exception!(
    _native,
    CodecError,
    PyValueError,
    "Bytes that are not a valid batch: args are (kind, message, position); kind is 'corrupt', \
     'truncated' or 'decompress', position the byte inside the parsed region or None."
);

fn to_py(err: Error) -> PyErr {
    match err {
        Error::Corrupt { message, position } => CodecError::new_err(("corrupt", message, position)),
        Error::Truncated => CodecError::new_err(("truncated", "truncated", None::<usize>)),
        Error::Decompress(message) => CodecError::new_err(("decompress", message, None::<usize>)),
        Error::Value(message) => PyValueError::new_err(message),
    }
}

/// Run `f` on the bytes of any contiguous buffer (bytes without a copy, or a memoryview,
/// mmap, bytearray held for the duration of the call).
fn with_bytes<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> PyResult<R>) -> PyResult<R> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        return f(bytes.as_bytes());
    }
    let buffer = PyBuffer::<u8>::get(obj)?;
    if !buffer.is_c_contiguous() {
        return Err(PyTypeError::new_err("a contiguous buffer is needed"));
    }
    // SAFETY: the buffer is held (so the memory stays valid) until `buffer` drops after `f`;
    // it is contiguous and `len_bytes` long. Its content may change under a concurrent
    // writer, which every read tolerates: all reads are bounds-checked by length only.
    let slice = unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) };
    f(slice)
}

/// `data[start:end]`, checked.
fn region(data: &[u8], start: usize, end: usize) -> PyResult<&[u8]> {
    data.get(start..end).ok_or_else(|| PyValueError::new_err(format!(
        "region [{start}, {end}) outside a buffer of {} bytes", data.len())))
}

#[pyfunction(name = "crc32c")]
#[pyo3(signature = (data, value=0))]
fn crc32c_py(data: &Bound<'_, PyAny>, value: u32) -> PyResult<u32> {
    with_bytes(data, |d| Ok(crc32c::crc32c_append(value, d)))
}

/// The 13 header fields of the batch at `buf[position]` after checking magic, length,
/// extent and (with `verify_crc`) the CRC; CodecError positions are `position`.
#[pyfunction]
#[pyo3(signature = (buf, position, verify_crc=true))]
fn parse_header<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, position: usize, verify_crc: bool)
                     -> PyResult<Bound<'py, PyTuple>> {
    let h = with_bytes(buf, |d| codec::parse_header(d, position, verify_crc).map_err(to_py))?;
    PyTuple::new(py, [
        h.base_offset.into_pyobject(py)?, (h.batch_length as i64).into_pyobject(py)?,
        (h.partition_leader_epoch as i64).into_pyobject(py)?, (h.magic as i64).into_pyobject(py)?,
        (h.crc as i64).into_pyobject(py)?, (h.attributes as i64).into_pyobject(py)?,
        (h.last_offset_delta as i64).into_pyobject(py)?, h.base_timestamp.into_pyobject(py)?,
        h.max_timestamp.into_pyobject(py)?, h.producer_id.into_pyobject(py)?,
        (h.producer_epoch as i64).into_pyobject(py)?, (h.base_sequence as i64).into_pyobject(py)?,
        (h.records_count as i64).into_pyobject(py)?,
    ])
}

fn inflate<'a>(codec: u8, data: &'a [u8], owned: &'a mut Vec<u8>) -> Result<&'a [u8], Error> {
    if codec == compression::NONE {
        return Ok(data);
    }
    *owned = compression::decompress(codec, data)?;
    Ok(owned.as_slice())
}

/// Builds instances of a tuple subclass (a NamedTuple such as Record or ConsumerRecord) the way
/// `tuple.__new__(cls, items)` does - the type's tp_alloc, then the items - without the
/// intermediate tuple and the call, which cost as much as decoding the record.
struct SubclassTuples<'py> {
    cls: Bound<'py, pyo3::types::PyType>,
    alloc: pyo3::ffi::allocfunc,
}

impl<'py> SubclassTuples<'py> {
    fn new(cls: &Bound<'py, PyAny>) -> PyResult<Self> {
        let cls = cls.cast::<pyo3::types::PyType>()?.clone();
        if !cls.is_subclass_of::<PyTuple>()? {
            return Err(PyTypeError::new_err("cls must be a subclass of tuple"));
        }
        // SAFETY: cls is a live type object; Py_tp_alloc is readable for every type (3.10+).
        let slot = unsafe { pyo3::ffi::PyType_GetSlot(cls.as_type_ptr(), pyo3::ffi::Py_tp_alloc) };
        if slot.is_null() {
            return Err(PyTypeError::new_err("cls has no tp_alloc"));
        }
        // SAFETY: the Py_tp_alloc slot holds an allocfunc.
        let alloc = unsafe { std::mem::transmute::<*mut std::ffi::c_void, pyo3::ffi::allocfunc>(slot) };
        Ok(SubclassTuples { cls, alloc })
    }

    fn make<const N: usize>(&self, items: [Bound<'py, PyAny>; N]) -> PyResult<Bound<'py, PyAny>> {
        let py = self.cls.py();
        // SAFETY: tp_alloc of a tuple subclass returns a new reference to a zeroed tuple of N
        // slots (or NULL with an exception set); PyTuple_SetItem steals each item's reference
        // into a slot of that fresh, unshared tuple, exactly as tuple_subtype_new fills it.
        unsafe {
            let obj = (self.alloc)(self.cls.as_type_ptr(), N as pyo3::ffi::Py_ssize_t);
            if obj.is_null() {
                return Err(PyErr::fetch(py));
            }
            let obj = Bound::from_owned_ptr(py, obj);
            for (i, item) in items.into_iter().enumerate() {
                if pyo3::ffi::PyTuple_SetItem(obj.as_ptr(), i as pyo3::ffi::Py_ssize_t, item.into_ptr()) != 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            Ok(obj)
        }
    }
}

/// Keeps the cyclic GC from running while a decoder creates thousands of objects: none of
/// them can be part of a cycle, and a collection pass per few hundred allocations would
/// cost more than the decoding. Restores the previous state when dropped.
struct NoGc(bool);

impl NoGc {
    fn new() -> Self {
        // SAFETY: called with the GC held; PyGC_Disable only flips the collector's switch.
        NoGc(unsafe { pyo3::ffi::PyGC_Disable() } != 0)
    }
}

impl Drop for NoGc {
    fn drop(&mut self) {
        if self.0 {
            // SAFETY: as above.
            unsafe { pyo3::ffi::PyGC_Enable() };
        }
    }
}

/// `a + b` as a Python int, exact even past 64 bits (a damaged header may hold any base).
fn py_sum<'py>(py: Python<'py>, a: i64, b: i64) -> PyResult<Bound<'py, PyAny>> {
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
    let items = rec.headers.iter().map(|(name, value)| {
        // Java's new String(bytes, UTF_8): invalid UTF-8 becomes U+FFFD instead of failing
        let name = PyString::new(py, &String::from_utf8_lossy(name));
        PyTuple::new(py, [name.into_any(), py_opt_bytes(py, *value)])
    }).collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// What every decoded record shares with its batch.
struct BatchContext {
    base_offset: i64,
    base_timestamp: i64,
    use_deltas: bool,
    base_sequence: i32,
}

/// offset, timestamp, key, value, headers, sequence: `storage.records.Record`'s fields.
fn record_fields<'py>(py: Python<'py>, ctx: &BatchContext, rec: &RecordView, fixed_ts: &Bound<'py, PyAny>)
                      -> PyResult<[Bound<'py, PyAny>; 6]> {
    let timestamp = if ctx.use_deltas { py_sum(py, ctx.base_timestamp, rec.timestamp_delta)? } else { fixed_ts.clone() };
    Ok([
        py_sum(py, ctx.base_offset, rec.offset_delta as i64)?,
        timestamp,
        py_opt_bytes(py, rec.key),
        py_opt_bytes(py, rec.value),
        py_headers(py, rec)?.into_any(),
        codec::sequence_of(ctx.base_sequence, rec.offset_delta).into_pyobject(py)?.into_any(),
    ])
}

/// Decode the `count` records of `buf[start:end]` (compressed with `codec`) into a list of
/// 6-tuples in `Record`'s field order, or of instances of the tuple subclass `cls`.
#[pyfunction]
#[pyo3(signature = (buf, start, end, codec, count, base_offset, base_timestamp, use_deltas, base_sequence, cls=None))]
#[allow(clippy::too_many_arguments)]
fn decode_records<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, start: usize, end: usize, codec: u8, count: i32,
                       base_offset: i64, base_timestamp: i64, use_deltas: bool, base_sequence: i32,
                       cls: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyList>> {
    let ctx = BatchContext { base_offset, base_timestamp, use_deltas, base_sequence };
    let fixed_ts = base_timestamp.into_pyobject(py)?.into_any();
    let maker = cls.map(SubclassTuples::new).transpose()?;
    collect_rows(py, buf, start, end, codec, count, |rec| {
        let fields = record_fields(py, &ctx, rec, &fixed_ts)?;
        Ok(Some(match &maker {
            Some(maker) => maker.make(fields)?,
            None => PyTuple::new(py, fields)?.into_any(),
        }))
    })
}

/// The records of `buf[start:end]` (compressed with `codec`), decoded one by one into what
/// `row` makes of each (None leaves a record out): the one record loop of both decoders.
fn collect_rows<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, start: usize, end: usize, codec: u8, count: i32,
                     mut row: impl FnMut(&RecordView) -> PyResult<Option<Bound<'py, PyAny>>>)
                     -> PyResult<Bound<'py, PyList>> {
    let _no_gc = NoGc::new();
    with_bytes(buf, |data| {
        let mut owned = Vec::new();
        let data = inflate(codec, region(data, start, end)?, &mut owned).map_err(to_py)?;
        let mut rows: Vec<Bound<'py, PyAny>> = Vec::with_capacity((count.max(0) as usize).min(data.len() / 7 + 1));
        let mut failure: Option<PyErr> = None;
        let outcome = codec::for_each_record(data, count, |rec| match row(&rec) {
            Ok(Some(made)) => { rows.push(made); Ok(()) }
            Ok(None) => Ok(()),
            Err(e) => { failure = Some(e); Err(Error::Truncated) }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        outcome.map_err(to_py)?;
        PyList::new(py, rows)
    })
}

/// Like decode_records, but straight into the 12-field tuples a Consumer hands out
/// (txlog.consumer_record.ConsumerRecord's order), keeping only offsets in [lo, hi):
/// topic, partition, offset, timestamp, timestamp_type, key, value, headers,
/// producer_id, producer_epoch, sequence, is_transactional.
#[pyfunction]
#[pyo3(signature = (buf, start, end, codec, count, base_offset, base_timestamp, use_deltas, base_sequence,
                    lo, hi, cls, topic, partition, timestamp_type, producer_id, producer_epoch, is_transactional))]
#[allow(clippy::too_many_arguments)]
fn decode_consumer_records<'py>(py: Python<'py>, buf: &Bound<'py, PyAny>, start: usize, end: usize, codec: u8,
                                count: i32, base_offset: i64, base_timestamp: i64, use_deltas: bool,
                                base_sequence: i32, lo: i64, hi: i64, cls: &Bound<'py, PyAny>,
                                topic: &Bound<'py, PyAny>, partition: &Bound<'py, PyAny>,
                                timestamp_type: &Bound<'py, PyAny>, producer_id: &Bound<'py, PyAny>,
                                producer_epoch: &Bound<'py, PyAny>, is_transactional: &Bound<'py, PyAny>)
                                -> PyResult<Bound<'py, PyList>> {
    let ctx = BatchContext { base_offset, base_timestamp, use_deltas, base_sequence };
    let fixed_ts = base_timestamp.into_pyobject(py)?.into_any();
    let maker = SubclassTuples::new(cls)?;
    collect_rows(py, buf, start, end, codec, count, |rec| {
        let offset = base_offset as i128 + rec.offset_delta as i128;
        if offset < lo as i128 || offset >= hi as i128 {
            return Ok(None);
        }
        let [o, t, k, v, h, s] = record_fields(py, &ctx, rec, &fixed_ts)?;
        Ok(Some(maker.make([topic.clone(), partition.clone(), o, t, timestamp_type.clone(), k, v, h,
                            producer_id.clone(), producer_epoch.clone(), s, is_transactional.clone()])?))
    })
}

/// (records seen, largest timestamp delta) of an uncompressed records region, walking
/// length varints only: the append path's framing check.
#[pyfunction]
fn walk_records(buf: &Bound<'_, PyAny>, start: usize, end: usize) -> PyResult<(i64, i64)> {
    with_bytes(buf, |data| codec::walk_records(region(data, start, end)?).map_err(to_py))
}

#[pyfunction]
fn compress<'py>(py: Python<'py>, codec: u8, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let out = with_bytes(data, |d| compression::compress(codec, d).map_err(to_py))?;
    Ok(PyBytes::new(py, &out))
}

#[pyfunction]
fn decompress<'py>(py: Python<'py>, codec: u8, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let out = with_bytes(data, |d| compression::decompress(codec, d).map_err(to_py))?;
    Ok(PyBytes::new(py, &out))
}

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
        .map_err(|_| PyTypeError::new_err(format!("{what} must be bytes-like or None, not {}",
                                                  obj.get_type().name().map(|n| n.to_string()).unwrap_or_default())))
}

/// One whole batch from record columns: keys, values (bytes-like or None), headers (None or
/// a sequence of (str | bytes, bytes | None)), timestamps (ints, already defaulted),
/// compressed per `attributes & 7`, with the CRC.
#[pyfunction]
#[pyo3(signature = (keys, values, headers, timestamps, *, base_offset, partition_leader_epoch, attributes,
                    base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence))]
#[allow(clippy::too_many_arguments)]
fn encode_batch<'py>(py: Python<'py>, keys: &Bound<'py, PyAny>, values: &Bound<'py, PyAny>,
                     headers: &Bound<'py, PyAny>, timestamps: &Bound<'py, PyAny>, base_offset: i64,
                     partition_leader_epoch: i32, attributes: i16, base_timestamp: i64, max_timestamp: i64,
                     producer_id: i64, producer_epoch: i16, base_sequence: i32) -> PyResult<Bound<'py, PyBytes>> {
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
                let [name, value]: [Bound<PyAny>; 2] = items.try_into().map_err(|_| {
                    PyValueError::new_err("a header must be a (key, value) pair")
                })?;
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
    let records: Vec<codec::RecordIn> = (0..n).map(|i| codec::RecordIn {
        key: keys[i].get(),
        value: values[i].get(),
        headers: header_items[i].iter().map(|(k, v)| (k.get().unwrap_or(&[]), v.get())).collect(),
        timestamp: timestamps[i],
    }).collect();
    let fields = codec::BatchFields { base_offset, partition_leader_epoch, attributes, base_timestamp, max_timestamp,
                                      producer_id, producer_epoch, base_sequence };
    let codec_id = (attributes & 0x07) as u8;
    let out = (|| {
        let mut payload = Vec::with_capacity(n * 32);
        codec::encode_records(&mut payload, &records, base_timestamp)?;
        if codec_id != compression::NONE {
            payload = compression::compress(codec_id, &payload)?;
        }
        codec::assemble(&payload, n, &fields)
    })().map_err(to_py)?;
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
            let copy: Box<[u8]> = with_bytes(&obj, |d| Ok(d.into())).map_err(|_| PyTypeError::new_err(format!(
                "{what} at index {index} must be bytes, bytearray, memoryview, str or None, not {}", type_name(&obj))))?;
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

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
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
                let [name, value]: [Bound<PyAny>; 2] = items.try_into().map_err(|_| PyValueError::new_err(
                    format!("header of the record at index {index} must be a (key, value) pair")))?;
                if name.is_none() {
                    return Err(PyTypeError::new_err(format!("header key of the record at index {index} cannot be None")));
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
        out.push(if ts.is_none() { now_ms } else {
            ts.extract::<i64>().map_err(|e| if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(ts.py()) {
                PyValueError::new_err(format!("timestamp at index {index} is out of int64 range"))
            } else {
                PyTypeError::new_err(format!("timestamp at index {index} must be an int or None, not {}", type_name(&ts)))
            })?
        });
    }
    Ok(encoder::Timestamps::Each(out))
}

/// Below this many bytes of records the encoder keeps the GIL: releasing it costs little,
/// but taking it back can wait a whole switch interval (5 ms) behind a busy thread.
const DETACH_BYTES: usize = 256 * 1024;

/// Whole batches from record columns, split as BatchBuilder splits (encoder::plan), as
/// instances of the tuple subclass `cls` with fields (data: bytearray, record_count,
/// max_timestamp). `timestamps` None, or a None in it, means `now_ms`.
///
/// Columns are read first (timestamps last: extracting an int may run Python code, which
/// could mutate a column - harmless, since every borrowed item is held by a strong
/// reference). Uncompressed batches are encoded straight into their final bytearrays,
/// allocated from the plan's exact sizes; past DETACH_BYTES the encoding runs without the GIL.
#[pyfunction]
#[pyo3(signature = (values, keys, headers, timestamps, *, max_bytes, codec, is_transactional, now_ms, cls))]
#[allow(clippy::too_many_arguments)]
fn encode_batches<'py>(py: Python<'py>, values: &Bound<'py, PyAny>, keys: Option<&Bound<'py, PyAny>>,
                       headers: Option<&Bound<'py, PyAny>>, timestamps: Option<&Bound<'py, PyAny>>,
                       max_bytes: i64, codec: u8, is_transactional: bool, now_ms: i64,
                       cls: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
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
        let arrays: Vec<Bound<'py, PyByteArray>> = spans.iter().map(|_| PyByteArray::new(py, &[])).collect();
        for (array, span) in arrays.iter().zip(&spans) {
            array.resize(span.size)?;
        }
        // SAFETY: each bytearray was just created here, is referenced only by `arrays` (no
        // Python code can reach it, so nothing resizes or frees it) and is `span.size` long;
        // the slices are dropped before `arrays` is handed out.
        let mut outs: Vec<&mut [u8]> = arrays.iter().map(|a| unsafe {
            std::slice::from_raw_parts_mut(a.data(), a.len())
        }).collect();
        let fill = |outs: &mut [&mut [u8]]| -> Result<(), Error> {
            outs.iter_mut().zip(&spans).try_for_each(|(out, span)| encoder::encode_uncompressed(&cols, span, &opts, out))
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
    let items = datas.into_iter().zip(&spans).map(|(data, span)| maker.make([
        data.into_any(),
        span.record_count().into_pyobject(py)?.into_any(),
        span.max_timestamp.into_pyobject(py)?.into_any(),
    ])).collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// Run `f` on the bytes of a writable contiguous buffer (a bytearray, or a memoryview or
/// mmap of writable memory), held for the duration of the call.
fn with_bytes_mut<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&mut [u8]) -> PyResult<R>) -> PyResult<R> {
    let buffer = PyBuffer::<u8>::get(obj)?;
    if buffer.readonly() {
        return Err(PyTypeError::new_err(format!("a writable buffer (a bytearray) is needed, not {}", type_name(obj))));
    }
    if !buffer.is_c_contiguous() {
        return Err(PyTypeError::new_err("a contiguous buffer is needed"));
    }
    // SAFETY: the buffer is held (so the memory stays valid) until `buffer` drops after `f`;
    // it is writable, contiguous and `len_bytes` long, and the GIL is held throughout, so
    // no other Python code touches it while `f` runs.
    let slice = unsafe { std::slice::from_raw_parts_mut(buffer.buf_ptr() as *mut u8, buffer.len_bytes()) };
    f(slice)
}

/// Patch producer id, epoch and base sequence of the one batch in `data` and recompute its
/// CRC (encoder::stamp); CodecError if `data` is not one whole, intact batch.
#[pyfunction]
fn stamp_batch(data: &Bound<'_, PyAny>, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> PyResult<()> {
    with_bytes_mut(data, |d| encoder::stamp(d, producer_id, producer_epoch, base_sequence).map_err(to_py))
}

/// Kafka's murmur2 partition of every key (bytes-like or str as UTF-8); -1 for a None key,
/// which the caller places by the sticky rule instead.
#[pyfunction]
fn murmur2_partitions<'py>(py: Python<'py>, keys: &Bound<'py, PyAny>, count: u32) -> PyResult<Bound<'py, PyList>> {
    if count == 0 {
        return Err(PyValueError::new_err("the partition count must be at least 1"));
    }
    let mut out: Vec<i64> = Vec::new();
    for (index, key) in keys.try_iter()?.enumerate() {
        let key = key?;
        let partition = if key.is_none() {
            -1
        } else if let Ok(b) = key.cast::<PyBytes>() {
            encoder::murmur2_partition(b.as_bytes(), count) as i64
        } else if let Ok(s) = key.cast::<PyString>() {
            encoder::murmur2_partition(s.to_str()?.as_bytes(), count) as i64
        } else {
            with_bytes(&key, |d| Ok(encoder::murmur2_partition(d, count) as i64)).map_err(|_| PyTypeError::new_err(
                format!("key at index {index} must be bytes, bytearray, memoryview, str or None, not {}",
                        type_name(&key))))?
        };
        out.push(partition);
    }
    PyList::new(py, out)
}

/// Decoded records gathered column by column for Arrow (see `finish` for the layout).
/// Batches are added one by one; nothing Python is created per record.
#[pyclass(module = "storage._native")]
#[derive(Default)]
struct ColumnBuilder {
    rows: usize,
    offset: Vec<u8>,        // int64 LE
    timestamp: Vec<u8>,     // int64 LE (epoch ms)
    sequence: Vec<u8>,      // int32 LE
    batch_index: Vec<u8>,   // int32 LE: which added batch each row came from
    key: BinaryColumn,
    value: BinaryColumn,
    header_offsets: Vec<u8>, // int32 LE, rows + 1
    header_count: i32,
    header_key: BinaryColumn,
    header_value: BinaryColumn,
    batches: i32,
}

/// An Arrow binary column: validity bitmap, int32 offsets, data.
#[derive(Default)]
struct BinaryColumn {
    validity: Vec<u8>,
    offsets: Vec<u8>,
    data: Vec<u8>,
    nulls: usize,
    len: usize,
}

impl BinaryColumn {
    fn push(&mut self, item: Option<&[u8]>) -> Result<(), Error> {
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
            .map_err(|_| Error::Value("a column holds more than 2 GiB: add fewer batches per builder".into()))?;
        self.offsets.extend_from_slice(&end.to_le_bytes());
        self.len += 1;
        Ok(())
    }

    fn export<'py>(&self, py: Python<'py>, out: &Bound<'py, PyDict>, prefix: &str) -> PyResult<()> {
        let offsets = if self.offsets.is_empty() { 0i32.to_le_bytes().to_vec() } else { self.offsets.clone() };
        out.set_item(format!("{prefix}_offsets"), PyBytes::new(py, &offsets))?;
        out.set_item(format!("{prefix}_data"), PyBytes::new(py, &self.data))?;
        out.set_item(format!("{prefix}_validity"),
                     if self.nulls == 0 { py.None().into_bound(py) } else { PyBytes::new(py, &self.validity).into_any() })?;
        out.set_item(format!("{prefix}_nulls"), self.nulls)?;
        Ok(())
    }
}

#[pymethods]
impl ColumnBuilder {
    #[new]
    fn new() -> Self {
        ColumnBuilder::default()
    }

    /// Decode one batch's records region `buf[start:end]` (compressed with `codec`) and
    /// append its records at offsets in [lo, hi); returns how many rows were added.
    #[pyo3(signature = (buf, start, end, codec, count, base_offset, base_timestamp, use_deltas, base_sequence,
                        lo=i64::MIN, hi=i64::MAX))]
    #[allow(clippy::too_many_arguments)]
    fn add(&mut self, buf: &Bound<'_, PyAny>, start: usize, end: usize, codec: u8, count: i32, base_offset: i64,
           base_timestamp: i64, use_deltas: bool, base_sequence: i32, lo: i64, hi: i64) -> PyResult<usize> {
        let before = self.rows;
        let batch = self.batches;
        let result = with_bytes(buf, |data| {
            let mut owned = Vec::new();
            let data = inflate(codec, region(data, start, end)?, &mut owned).map_err(to_py)?;
            // decode into a scratch builder first so a corrupt batch adds nothing
            let mut rows: Vec<RecordView> = Vec::new();
            codec::for_each_record(data, count, |rec| { rows.push(rec); Ok(()) }).map_err(to_py)?;
            for rec in rows {
                let offset = base_offset.saturating_add(rec.offset_delta as i64);
                if offset < lo || offset >= hi {
                    continue;
                }
                let ts = if use_deltas { base_timestamp.wrapping_add(rec.timestamp_delta) } else { base_timestamp };
                self.push(offset, ts, codec::sequence_of(base_sequence, rec.offset_delta) as i32, batch, &rec)
                    .map_err(to_py)?;
            }
            Ok(())
        });
        if result.is_err() {
            self.truncate(before);
        }
        result?;
        self.batches += 1;
        Ok(self.rows - before)
    }

    #[getter]
    fn rows(&self) -> usize {
        self.rows
    }

    /// How many add() calls succeeded: the next batch_index.
    #[getter]
    fn batches(&self) -> i32 {
        self.batches
    }

    /// The columns as bytes: offset/timestamp int64 LE, sequence and batch_index int32 LE,
    /// key_/value_ {offsets int32, data, validity bitmap or None, nulls}, headers as
    /// header_offsets (int32 list offsets) into header_key_* / header_value_* binary columns.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        out.set_item("rows", self.rows)?;
        out.set_item("offset", PyBytes::new(py, &self.offset))?;
        out.set_item("timestamp", PyBytes::new(py, &self.timestamp))?;
        out.set_item("sequence", PyBytes::new(py, &self.sequence))?;
        out.set_item("batch_index", PyBytes::new(py, &self.batch_index))?;
        self.key.export(py, &out, "key")?;
        self.value.export(py, &out, "value")?;
        let header_offsets = if self.header_offsets.is_empty() { 0i32.to_le_bytes().to_vec() }
                             else { self.header_offsets.clone() };
        out.set_item("header_offsets", PyBytes::new(py, &header_offsets))?;
        self.header_key.export(py, &out, "header_key")?;
        self.header_value.export(py, &out, "header_value")?;
        Ok(out)
    }
}

impl ColumnBuilder {
    fn push(&mut self, offset: i64, ts: i64, sequence: i32, batch: i32, rec: &RecordView) -> Result<(), Error> {
        if self.header_offsets.is_empty() {
            self.header_offsets.extend_from_slice(&0i32.to_le_bytes());
        }
        self.offset.extend_from_slice(&offset.to_le_bytes());
        self.timestamp.extend_from_slice(&ts.to_le_bytes());
        self.sequence.extend_from_slice(&sequence.to_le_bytes());
        self.batch_index.extend_from_slice(&batch.to_le_bytes());
        self.key.push(rec.key)?;
        self.value.push(rec.value)?;
        for (name, value) in &rec.headers {
            // Arrow strings must be UTF-8: decode as Java does, invalid bytes become U+FFFD
            self.header_key.push(Some(String::from_utf8_lossy(name).as_bytes()))?;
            self.header_value.push(*value)?;
        }
        self.header_count = i32::try_from(self.header_key.len)
            .map_err(|_| Error::Value("too many headers for one builder".into()))?;
        self.header_offsets.extend_from_slice(&self.header_count.to_le_bytes());
        self.rows += 1;
        Ok(())
    }

    /// Drop rows past `rows` (a batch that failed half way adds nothing).
    fn truncate(&mut self, rows: usize) {
        if self.rows == rows {
            return;
        }
        // rebuilding is rare (only after corruption): replay the kept prefix
        let keep_headers = if rows == 0 { 0 } else {
            i32::from_le_bytes(self.header_offsets[rows * 4..rows * 4 + 4].try_into().unwrap_or([0; 4])) as usize
        };
        self.offset.truncate(rows * 8);
        self.timestamp.truncate(rows * 8);
        self.sequence.truncate(rows * 4);
        self.batch_index.truncate(rows * 4);
        self.header_offsets.truncate((rows + 1) * 4);
        truncate_binary(&mut self.key, rows);
        truncate_binary(&mut self.value, rows);
        truncate_binary(&mut self.header_key, keep_headers);
        truncate_binary(&mut self.header_value, keep_headers);
        self.header_count = keep_headers as i32;
        self.rows = rows;
    }
}

fn truncate_binary(col: &mut BinaryColumn, len: usize) {
    if col.len <= len {
        return;
    }
    let end = if col.offsets.len() >= (len + 1) * 4 {
        i32::from_le_bytes(col.offsets[len * 4..len * 4 + 4].try_into().unwrap_or([0; 4])) as usize
    } else { 0 };
    col.data.truncate(end);
    col.offsets.truncate((len + 1) * 4);
    col.validity.truncate(len.div_ceil(8));
    if !len.is_multiple_of(8) {
        if let Some(last) = col.validity.last_mut() {
            *last &= (1u8 << (len % 8)) - 1;
        }
    }
    col.nulls = (0..len).filter(|i| col.validity[i / 8] & (1 << (i % 8)) == 0).count();
    col.len = len;
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CodecError", m.py().get_type::<CodecError>())?;
    m.add_function(wrap_pyfunction!(crc32c_py, m)?)?;
    m.add_function(wrap_pyfunction!(parse_header, m)?)?;
    m.add_function(wrap_pyfunction!(decode_records, m)?)?;
    m.add_function(wrap_pyfunction!(decode_consumer_records, m)?)?;
    m.add_function(wrap_pyfunction!(walk_records, m)?)?;
    m.add_function(wrap_pyfunction!(compress, m)?)?;
    m.add_function(wrap_pyfunction!(decompress, m)?)?;
    m.add_function(wrap_pyfunction!(encode_batch, m)?)?;
    m.add_function(wrap_pyfunction!(encode_batches, m)?)?;
    m.add_function(wrap_pyfunction!(stamp_batch, m)?)?;
    m.add_function(wrap_pyfunction!(murmur2_partitions, m)?)?;
    m.add_class::<ColumnBuilder>()?;
    m.add_class::<batch_builder::RecordBatchBuilder>()?;
    Ok(())
}
