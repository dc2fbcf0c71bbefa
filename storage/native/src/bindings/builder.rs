//! `RecordBatchBuilder`: batch_builder.rs's `OpenBatch` as the Python class
//! storage.records.BatchBuilder. An append never releases the GIL: the producer relies on
//! `try_append` being atomic (checked, sized and written in one C call).

use std::borrow::Cow;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple, PyType};

use super::errors::to_py;
use super::ffi::{type_name, DETACH_BYTES};
use crate::batch_builder::{payload_of, write_batch, Appended, BatchOptions, OpenBatch};
use crate::codec::{self, HeaderIn};
use crate::compression;

/// A key, value or header field borrowed for one append: bytes and str (its cached UTF-8)
/// without a copy; any other buffer is held (so it cannot be resized or freed) until the
/// record's bytes are written, which happens before the append returns.
enum Held<'a> {
    Null,
    Slice(&'a [u8]),
    Buffer(PyBuffer<u8>),
}

impl Held<'_> {
    fn get(&self) -> Option<&[u8]> {
        match self {
            Held::Null => None,
            Held::Slice(s) => Some(*s),
            // SAFETY: the buffer is held by `self` (its memory stays valid and unresized while
            // the borrow lives), it is C-contiguous (checked in `hold`) and `len_bytes` long;
            // the GIL is held for the whole append, so no Python code writes to it meanwhile.
            Held::Buffer(b) => Some(unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) }),
        }
    }
}

fn type_error(obj: &Bound<'_, PyAny>, what: &str) -> PyErr {
    PyTypeError::new_err(format!("{what} must be bytes, bytearray, memoryview, str or None, not {}", type_name(obj)))
}

fn hold<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Held<'a>> {
    if obj.is_none() {
        return Ok(Held::Null);
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Held::Slice(b.as_bytes()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Held::Slice(s.to_str()?.as_bytes()));
    }
    let buffer = PyBuffer::<u8>::get(obj).map_err(|_| type_error(obj, what))?;
    if !buffer.is_c_contiguous() {
        return Err(PyTypeError::new_err(format!("{what} must be a contiguous buffer")));
    }
    Ok(Held::Buffer(buffer))
}

/// The (name, value) pairs of a record's headers: None or any iterable of 2-item iterables,
/// as Python's `for name, value in headers` unpacks them (a list of tuples without iterating).
fn header_pairs<'py>(headers: Option<&Bound<'py, PyAny>>) -> PyResult<Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
    let Some(headers) = headers else { return Ok(Vec::new()) };
    let pair = |item: Bound<'py, PyAny>| -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        if let Ok(t) = item.cast::<PyTuple>() {
            if t.len() == 2 {
                return Ok((t.get_item(0)?, t.get_item(1)?));
            }
        }
        let items = item.try_iter()?.collect::<PyResult<Vec<_>>>()?;
        let [name, value]: [Bound<'py, PyAny>; 2] =
            items.try_into().map_err(|_| PyValueError::new_err("a header must be a (key, value) pair"))?;
        Ok((name, value))
    };
    if let Ok(list) = headers.cast::<PyList>() {
        return list.iter().map(pair).collect();
    }
    headers.try_iter()?.map(|item| pair(item?)).collect()
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn timestamp_of(timestamp: Option<&Bound<'_, PyAny>>) -> PyResult<i64> {
    match timestamp {
        None => Ok(now_ms()),
        Some(ts) => ts.extract::<i64>().map_err(|err| {
            if err.is_instance_of::<PyOverflowError>(ts.py()) {
                PyValueError::new_err(format!("timestamp {ts} is out of int64 range"))
            } else {
                PyTypeError::new_err(format!("timestamp must be an int or None, not {}", type_name(ts)))
            }
        }),
    }
}

/// An int option that may exceed int64 (a "no limit" max_bytes): clamped, as a limit it means the same.
fn clamped_i64(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    match obj.extract::<i64>() {
        Ok(v) => Ok(v),
        Err(err) if err.is_instance_of::<PyOverflowError>(obj.py()) => Ok(if obj.gt(0)? { i64::MAX } else { i64::MIN }),
        Err(err) => Err(err),
    }
}

/// An int header field: out of the field's range is a ValueError naming it (what a Python
/// caller of the old builder got), not an OverflowError.
fn int_field(value: &Bound<'_, PyAny>, name: &str, min: i64, max: i64) -> PyResult<i64> {
    let out_of_range = || PyValueError::new_err(format!("batch header field out of range: {name}={value}"));
    match value.extract::<i64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        Ok(_) => Err(out_of_range()),
        Err(err) if err.is_instance_of::<PyOverflowError>(value.py()) => Err(out_of_range()),
        Err(err) => Err(err),
    }
}

/// A Compression code, or storage.errors.UnsupportedCompressionTypeError (imported only when
/// raised, so the codec keeps no Python state; ValueError if even that import fails).
fn codec_of(value: &Bound<'_, PyAny>) -> PyResult<u8> {
    match value.extract::<i64>() {
        Ok(code) if (0..=compression::ZSTD as i64).contains(&code) => Ok(code as u8),
        _ => {
            let message = format!("unknown compression type {value}");
            let typed = value
                .py()
                .import("storage.errors")
                .and_then(|m| m.getattr("UnsupportedCompressionTypeError"))
                .and_then(|cls| cls.call1((message.as_str(),)));
            Err(match typed {
                Ok(err) => PyErr::from_value(err),
                Err(_) => PyValueError::new_err(message),
            })
        }
    }
}

/// Accumulates the records of one batch up to `max_bytes`, encoding each as it is appended
/// (RecordBatch v2). The size check is the exact uncompressed size (an upper bound for a
/// compressed batch); as in the Java producer a batch's first record is always accepted.
/// `build(**overrides)` returns the batch with header fields decided at send time.
#[pyclass(module = "storage._native", subclass)]
pub struct RecordBatchBuilder {
    batch: OpenBatch,
    options: BatchOptions,
}

impl RecordBatchBuilder {
    /// Timestamp, then views, then the append: every Python call that could run Python code
    /// (int conversion, header iteration) is done before any byte is written.
    fn append_record(
        &mut self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<usize>> {
        let timestamp = timestamp_of(timestamp)?;
        let key = hold(key, "key")?;
        let value = hold(value, "value")?;
        let pairs = header_pairs(headers)?;
        let held = pairs
            .iter()
            .map(|(name, value)| {
                if name.is_none() {
                    return Err(PyTypeError::new_err("a header key cannot be None"));
                }
                Ok((hold(name, "header key")?, hold(value, "header value")?))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let views: Vec<HeaderIn> = held.iter().map(|(n, v)| (n.get().unwrap_or_default(), v.get())).collect();
        self.batch.try_append(key.get(), value.get(), &views, timestamp).map_err(to_py)
    }

    /// Set the options named in `kwargs` (the constructor's and build's keywords, one rule).
    fn apply(options: &mut BatchOptions, kwargs: &Bound<'_, PyDict>, method: &str) -> PyResult<()> {
        for (name, value) in kwargs.iter() {
            let name = name.cast::<PyString>()?.to_str()?;
            let int = |min: i64, max: i64| int_field(&value, name, min, max);
            match name {
                "base_offset" => options.base_offset = int(i64::MIN, i64::MAX)?,
                "partition_leader_epoch" => {
                    options.partition_leader_epoch = int(i32::MIN.into(), i32::MAX.into())? as i32
                }
                "producer_id" => options.producer_id = int(i64::MIN, i64::MAX)?,
                "producer_epoch" => options.producer_epoch = int(i16::MIN.into(), i16::MAX.into())? as i16,
                "base_sequence" => options.base_sequence = int(i32::MIN.into(), i32::MAX.into())? as i32,
                "is_transactional" => options.is_transactional = value.is_truthy()?,
                "compression" => options.codec = codec_of(&value)?,
                "timestamp_type" => options.log_append_time_type = value.is_truthy()?,
                "log_append_time" => {
                    options.log_append_time = if value.is_none() { None } else { Some(int(i64::MIN, i64::MAX)?) }
                }
                other => {
                    return Err(PyTypeError::new_err(format!(
                        "{method}() got an unexpected keyword argument '{other}'"
                    )))
                }
            }
        }
        Ok(())
    }

    /// The batch with `options` (build's and stamp_build's one body).
    fn build_with<'py>(slf: &Bound<'py, Self>, options: BatchOptions) -> PyResult<Bound<'py, PyBytes>> {
        let py = slf.py();
        let this = slf.borrow();
        options.check().and_then(|_| this.batch.check_not_empty()).map_err(to_py)?;
        let fields = this.batch.fields(&options);
        let count = this.batch.record_count();
        let payload: Cow<'_, [u8]> = if options.codec != compression::NONE && this.batch.records().len() >= DETACH_BYTES
        {
            let copy = this.batch.records().to_vec();
            drop(this);
            Cow::Owned(py.detach(move || compression::compress(options.codec, &copy)).map_err(to_py)?)
        } else {
            payload_of(this.batch.records(), options.codec).map_err(to_py)?
        };
        PyBytes::new_with(py, codec::HEADER_SIZE + payload.len(), |out| {
            write_batch(out, &payload, count, &fields).map_err(to_py)
        })
    }

    fn checked_index(&self, index: isize) -> PyResult<Appended> {
        let count = self.batch.record_count() as isize;
        let at = if index < 0 { index + count } else { index };
        if at < 0 { None } else { self.batch.appended(at as usize) }
            .ok_or_else(|| PyIndexError::new_err(format!("record index {index} out of range for {count} records")))
    }
}

#[pymethods]
impl RecordBatchBuilder {
    /// Options as keywords: max_bytes (default 16384; past int64 means no limit), and the
    /// header fields base_offset, producer_id, producer_epoch, base_sequence,
    /// partition_leader_epoch, is_transactional, compression (a Compression code),
    /// timestamp_type (a TimestampType), log_append_time (None: the largest timestamp).
    #[new]
    #[pyo3(signature = (*, max_bytes=None, **options),
           text_signature = "(*, max_bytes=16384, base_offset=0, producer_id=-1, producer_epoch=-1, \
                             base_sequence=-1, is_transactional=False, compression=0, timestamp_type=0, \
                             partition_leader_epoch=-1, log_append_time=None)")]
    fn new(max_bytes: Option<&Bound<'_, PyAny>>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut batch_options = BatchOptions::default();
        if let Some(options) = options {
            Self::apply(&mut batch_options, options, "BatchBuilder")?;
        }
        let max_bytes = max_bytes.map(clamped_i64).transpose()?.unwrap_or(16384);
        Ok(RecordBatchBuilder { batch: OpenBatch::new(max_bytes), options: batch_options })
    }

    /// The record's index in the batch, or -1 (nothing changed) when the builder is closed or
    /// the record does not fit. One call, never releasing the GIL: atomic for the producer.
    #[pyo3(signature = (key, value, headers=None, timestamp=None))]
    fn try_append(
        &mut self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<isize> {
        Ok(self.append_record(key, value, headers, timestamp)?.map_or(-1, |i| i as isize))
    }

    /// Add a record if it fits; False (and nothing changed) when it would exceed max_bytes
    /// or the builder is closed. A None timestamp means now (ms).
    #[pyo3(signature = (key, value, headers=None, timestamp=None))]
    fn append(
        &mut self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        Ok(self.append_record(key, value, headers, timestamp)?.is_some())
    }

    /// No further appends (idempotent); build still works.
    fn close(&mut self) {
        self.batch.close();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.batch.is_closed()
    }

    #[getter]
    fn record_count(&self) -> usize {
        self.batch.record_count()
    }

    /// The exact uncompressed size so far, the 61-byte header included.
    #[getter]
    fn estimated_size(&self) -> usize {
        self.batch.estimated_size()
    }

    #[getter]
    fn max_bytes(&self) -> i64 {
        self.batch.max_bytes()
    }

    /// The largest record timestamp, None while empty.
    #[getter]
    fn max_timestamp(&self) -> Option<i64> {
        self.batch.max_timestamp()
    }

    fn timestamp_at(&self, index: isize) -> PyResult<i64> {
        Ok(self.checked_index(index)?.timestamp)
    }

    /// Serialized key size of record `index`, -1 for a null key.
    fn key_size_at(&self, index: isize) -> PyResult<i32> {
        Ok(self.checked_index(index)?.key_size)
    }

    /// Serialized value size of record `index`, -1 for a null value.
    fn value_size_at(&self, index: isize) -> PyResult<i32> {
        Ok(self.checked_index(index)?.value_size)
    }

    /// The batch. `overrides` replace constructor options decided only at send time (e.g. the
    /// producer's base sequence); the builder is not changed, so building twice gives the
    /// same bytes. A large compressed batch is compressed without the GIL, from a copy of
    /// its records (an append meanwhile must neither wait nor see a borrowed builder).
    #[pyo3(signature = (**overrides))]
    fn build<'py>(slf: &Bound<'py, Self>, overrides: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, PyBytes>> {
        let mut options = slf.borrow().options;
        if let Some(overrides) = overrides {
            Self::apply(&mut options, overrides, "build")?;
        }
        Self::build_with(slf, options)
    }

    /// `build(producer_id=, producer_epoch=, base_sequence=)` with positional arguments: the
    /// producer's stamp of every batch it sends, without the keyword dict `build` parses (about
    /// a third of a microsecond of a durable one-record send, issue 26).
    fn stamp_build<'py>(
        slf: &Bound<'py, Self>,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut options = slf.borrow().options;
        options.producer_id = producer_id;
        options.producer_epoch = producer_epoch;
        options.base_sequence = base_sequence;
        Self::build_with(slf, options)
    }

    /// Record `index`'s (timestamp, key size, value size), what the producer's RecordMetadata
    /// reads of it: one call instead of `timestamp_at`, `key_size_at` and `value_size_at`.
    fn metadata_at(&self, index: isize) -> PyResult<(i64, i32, i32)> {
        let record = self.checked_index(index)?;
        Ok((record.timestamp, record.key_size, record.value_size))
    }

    fn __repr__(&self) -> String {
        format!(
            "RecordBatchBuilder(record_count={}, estimated_size={}, max_bytes={}, closed={})",
            self.batch.record_count(),
            self.batch.estimated_size(),
            self.batch.max_bytes(),
            if self.batch.is_closed() { "True" } else { "False" }
        )
    }
}

/// A partition `known` answered for: (topic, partition number, its TopicPartition).
type KnownPartition = (Py<PyAny>, i64, Py<PyAny>);

/// The producer's `send` for its usual call, in one native call: a record of bytes (or None)
/// key and value, no headers, no timestamp (the builder reads the clock) or an int one, to a
/// partition whose TopicPartition the producer already knows, appended to that partition's
/// open batch; with no open batch, or a full one, to the batch `append_new` opens
/// (txlog.clients.producer.Producer._append_new, the reference's own next step in that case: a
/// durable one-record send opens a batch for every record, issue 26). Anything else - another
/// type, headers, a partition not seen before, a producer that may not send now - is handed,
/// arguments unchanged, to `slow` (txlog.clients.producer.Producer.send, the reference, which
/// decides every case this one does the same way). The record goes in under the GIL in this one
/// call, as the Python path's `try_append` does, so a batch the sender has sealed still refuses it.
///
/// What it reads of the producer, all live objects it shares with the Python path: `status`
/// (its `sendable` must be True), `single` (topic -> TopicPartition of one-partition topics,
/// used only without a `custom_partitioner`: a callable partitioner sees every record), `known`
/// ((topic, partition) -> TopicPartition, only partitions the producer checked), `open`
/// (TopicPartition -> the batch whose `builder` takes appends), and `future` (a tuple
/// subclass: the future is future((batch, index))).
#[pyclass(module = "storage._native", frozen)]
pub struct SendFastPath {
    status: Py<PyAny>,
    single: Py<PyDict>,
    known: Py<PyDict>,
    open: Py<PyDict>,
    future: Py<PyType>,
    future_alloc: pyo3::ffi::allocfunc,
    slow: Py<PyAny>,
    append_new: Py<PyAny>,
    custom_partitioner: bool,
    wall_clock: bool,
    /// The last partition found in `known` (see `known_tp`).
    last_known: Mutex<Option<KnownPartition>>,
}

impl SendFastPath {
    /// The future of the record appended on the fast path, or None when `slow` must take it.
    #[allow(clippy::too_many_arguments)] // Producer.send's six parameters, and `py`
    fn fast<'py>(
        &self,
        py: Python<'py>,
        topic: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        key: &Bound<'py, PyAny>,
        partition: &Bound<'py, PyAny>,
        headers: &Bound<'py, PyAny>,
        timestamp_ms: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let plain = |v: &Bound<'py, PyAny>| v.is_none() || v.is_exact_instance_of::<PyBytes>();
        let stamped =
            if timestamp_ms.is_none() { self.wall_clock } else { timestamp_ms.is_exact_instance_of::<PyInt>() };
        if !(plain(key) && plain(value) && headers.is_none() && stamped) {
            return Ok(None);
        }
        match self.status.bind(py).getattr(intern!(py, "sendable")) {
            Ok(flag) if flag.is(&*PyBool::new(py, true)) => {}
            _ => return Ok(None),
        }
        let tp = if partition.is_none() {
            if self.custom_partitioner {
                return Ok(None);
            }
            self.single.bind(py).get_item(topic)
        } else if partition.is_exact_instance_of::<PyInt>() {
            self.known_tp(py, topic, partition)
        } else {
            return Ok(None);
        };
        let Ok(Some(tp)) = tp else { return Ok(None) };
        let timestamp = if timestamp_ms.is_none() { None } else { Some(timestamp_ms) };
        let Ok(open) = self.open.bind(py).get_item(&tp) else { return Ok(None) };
        if let Some(batch) = open {
            let Ok(builder) = batch.getattr(intern!(py, "builder")) else { return Ok(None) };
            let Ok(builder) = builder.cast::<RecordBatchBuilder>() else { return Ok(None) };
            let Ok(mut builder) = builder.try_borrow_mut() else { return Ok(None) };
            // An error here is the one the Python path's try_append would raise (nothing appended).
            if let Some(index) = builder.append_record(key, value, None, timestamp)? {
                drop(builder);
                return self.future_of(py, batch, index).map(Some);
            }
        }
        // No open batch, or a full one: the reference's own next step, `append_new`, with what it
        // would pass (its timestamp is None on the wall clock, the int given otherwise, as here).
        let none = py.None().into_bound(py);
        let ts = timestamp.cloned().unwrap_or_else(|| none.clone());
        let opened = self.append_new.bind(py).call1((tp, key, value, none, ts))?;
        let (batch, index): (Bound<'py, PyAny>, usize) = opened.extract()?;
        self.future_of(py, batch, index).map(Some)
    }

    /// known[(topic, partition)], the last answer kept: a send loop names the same partition
    /// again and again, and the tuple made and hashed for each lookup was a tenth of the call.
    /// The producer only adds to `known` and never changes an entry, so a kept answer stays
    /// right; the topic is matched by identity (the kept reference keeps it alive), anything
    /// else is looked up.
    fn known_tp<'py>(
        &self,
        py: Python<'py>,
        topic: &Bound<'py, PyAny>,
        partition: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Ok(number) = partition.extract::<i64>() else { return Ok(None) };
        if let Ok(last) = self.last_known.lock() {
            if let Some((kept_topic, kept_number, tp)) = last.as_ref() {
                if kept_topic.is(topic) && *kept_number == number {
                    return Ok(Some(tp.bind(py).clone()));
                }
            }
        }
        let tp = self.known.bind(py).get_item(PyTuple::new(py, [topic, partition])?)?;
        if let Some(tp) = &tp {
            let entry = Some((topic.clone().unbind(), number, tp.clone().unbind()));
            // The entry it replaces is dropped after the lock is let go: its release runs no
            // Python code under the lock.
            let _replaced = self.last_known.lock().map(|mut last| std::mem::replace(&mut *last, entry));
        }
        Ok(tp)
    }

    /// future((batch, index)), made as tuple.__new__ makes it (ffi.rs SubclassTuples).
    fn future_of<'py>(&self, py: Python<'py>, batch: Bound<'py, PyAny>, index: usize) -> PyResult<Bound<'py, PyAny>> {
        let index = index.into_pyobject(py)?.into_any();
        // SAFETY: `future_alloc` is the tp_alloc of `future`, a tuple subclass (checked in
        // `new`); it returns a new reference to a zeroed 2-slot tuple (or NULL with an
        // exception set), and PyTuple_SetItem steals each item into that fresh, unshared tuple.
        unsafe {
            let obj = (self.future_alloc)(self.future.bind(py).as_type_ptr(), 2);
            if obj.is_null() {
                return Err(PyErr::fetch(py));
            }
            let obj = Bound::from_owned_ptr(py, obj);
            for (i, item) in [batch, index].into_iter().enumerate() {
                if pyo3::ffi::PyTuple_SetItem(obj.as_ptr(), i as pyo3::ffi::Py_ssize_t, item.into_ptr()) != 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            Ok(obj)
        }
    }
}

#[pymethods]
impl SendFastPath {
    #[new]
    #[pyo3(signature = (*, status, single, known, open, future, slow, append_new, custom_partitioner, wall_clock))]
    #[allow(clippy::too_many_arguments)] // keywords only: what the producer shares, by name
    fn new(
        status: Py<PyAny>,
        single: Py<PyDict>,
        known: Py<PyDict>,
        open: Py<PyDict>,
        future: &Bound<'_, PyAny>,
        slow: Py<PyAny>,
        append_new: Py<PyAny>,
        custom_partitioner: bool,
        wall_clock: bool,
    ) -> PyResult<Self> {
        let tuples = super::ffi::SubclassTuples::new(future)?;
        let (future, future_alloc) = tuples.parts();
        Ok(SendFastPath {
            status,
            single,
            known,
            open,
            future,
            future_alloc,
            slow,
            append_new,
            custom_partitioner,
            wall_clock,
            last_known: Mutex::new(None),
        })
    }

    /// Producer.send's signature and outcome (see the class): the record's future.
    #[pyo3(signature = (topic, value=None, key=None, partition=None, headers=None, timestamp_ms=None))]
    #[allow(clippy::too_many_arguments)] // Producer.send's six parameters, and `py`
    fn send<'py>(
        &self,
        py: Python<'py>,
        topic: &Bound<'py, PyAny>,
        value: Option<&Bound<'py, PyAny>>,
        key: Option<&Bound<'py, PyAny>>,
        partition: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
        timestamp_ms: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let none = py.None().into_bound(py);
        let or_none = |v: Option<&Bound<'py, PyAny>>| v.cloned().unwrap_or_else(|| none.clone());
        let (value, key, partition, headers, timestamp_ms) =
            (or_none(value), or_none(key), or_none(partition), or_none(headers), or_none(timestamp_ms));
        if let Some(future) = self.fast(py, topic, &value, &key, &partition, &headers, &timestamp_ms)? {
            return Ok(future);
        }
        self.slow.bind(py).call1((topic, value, key, partition, headers, timestamp_ms))
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.status)?;
        visit.call(&self.single)?;
        visit.call(&self.known)?;
        visit.call(&self.open)?;
        visit.call(&self.future)?;
        visit.call(&self.slow)?;
        visit.call(&self.append_new)?;
        if let Ok(last) = self.last_known.try_lock() {
            if let Some((topic, _, tp)) = last.as_ref() {
                visit.call(topic)?;
                visit.call(tp)?;
            }
        }
        Ok(())
    }
}
