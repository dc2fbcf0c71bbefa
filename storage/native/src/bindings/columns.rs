//! `ColumnBuilder`: columns.rs's `RecordColumns` as a Python class (storage.arrow_records).

use std::ffi::{c_int, c_void};

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use super::errors::to_py;
use super::ffi::{type_name, with_bytes, DETACH_BYTES};
use super::header::BatchHeader;
use crate::columns::{BinaryParts, RecordColumns, Span, Wanted};

/// Decoded records gathered column by column for Arrow (see `finish` for the layout).
/// Batches are added one by one or in bulk; nothing Python is created per record.
#[pyclass(module = "storage._native")]
#[derive(Default)]
pub struct ColumnBuilder {
    columns: RecordColumns,
}

/// One column's bytes, owned by Python without a copy: `finish` moves the builder's vectors
/// into these, and pyarrow wraps them through the buffer protocol (read-only).
///
/// Why not bytes: copying every column into a bytes object cost as much as a tenth of a scan.
#[pyclass(frozen, module = "storage._native")]
pub struct ColumnBuffer {
    data: Vec<u8>,
}

#[pymethods]
impl ColumnBuffer {
    /// # Safety
    /// Called by Python with a valid `view`; the vector is never changed (the class is frozen),
    /// so the pointer stays valid while the view holds its reference to `slf`.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if flags & pyo3::ffi::PyBUF_WRITABLE != 0 {
            return Err(PyBufferError::new_err("a ColumnBuffer is read-only"));
        }
        let data = &slf.get().data;
        // SAFETY: see above; PyBuffer_FillInfo takes a new reference to `slf` for the view.
        let rc = unsafe {
            pyo3::ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                data.as_ptr() as *mut c_void,
                data.len() as pyo3::ffi::Py_ssize_t,
                1,
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(_slf: Bound<'_, Self>, _view: *mut pyo3::ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.data.len()
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.data)
    }
}

fn buffer(py: Python<'_>, data: Vec<u8>) -> PyResult<Py<ColumnBuffer>> {
    Py::new(py, ColumnBuffer { data })
}

fn export(py: Python<'_>, out: &Bound<'_, PyDict>, prefix: &str, column: BinaryParts) -> PyResult<()> {
    out.set_item(format!("{prefix}_offsets"), buffer(py, column.offsets)?)?;
    out.set_item(format!("{prefix}_data"), buffer(py, column.data)?)?;
    out.set_item(format!("{prefix}_validity"), column.validity.map(|v| buffer(py, v)).transpose()?)?;
    out.set_item(format!("{prefix}_nulls"), column.nulls)?;
    Ok(())
}

/// A batch's bytes held for a bulk add: bytes (immutable) by a strong reference, any other
/// buffer held, so either stays valid while the GIL is released.
enum Held<'py> {
    Bytes(Bound<'py, PyBytes>),
    Buffer(PyBuffer<u8>),
}

impl Held<'_> {
    fn slice(&self) -> &[u8] {
        match self {
            Held::Bytes(b) => b.as_bytes(),
            // SAFETY: the buffer is held by `self` (valid and not resized while held), contiguous
            // (checked in `hold`) and `len_bytes` long. Its content may change under a concurrent
            // writer, which decoding tolerates: every read is bounds-checked by length only.
            Held::Buffer(b) => unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) },
        }
    }
}

fn hold<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Held<'py>> {
    if let Ok(bytes) = obj.cast::<PyBytes>() {
        return Ok(Held::Bytes(bytes.clone()));
    }
    let buffer = PyBuffer::<u8>::get(obj)
        .map_err(|_| PyTypeError::new_err(format!("a batch's buffer must be bytes-like, not {}", type_name(obj))))?;
    if !buffer.is_c_contiguous() {
        return Err(PyTypeError::new_err("a contiguous buffer is needed"));
    }
    Ok(Held::Buffer(buffer))
}

/// The (buffer, position, header) triples of `add_batches`, held.
fn held_spans<'py>(spans: &Bound<'py, PyAny>) -> PyResult<Vec<(Held<'py>, usize, crate::codec::Header)>> {
    let mut out = Vec::new();
    for item in spans.try_iter()? {
        let item = item?;
        let triple = item
            .cast::<PyTuple>()
            .ok()
            .filter(|t| t.len() == 3)
            .ok_or_else(|| PyTypeError::new_err("each span must be a (buffer, position, header) tuple"))?;
        let header = triple.get_item(2)?;
        let header = header
            .cast::<BatchHeader>()
            .map_err(|_| {
                PyTypeError::new_err(format!("a span's header must be a BatchHeader, not {}", type_name(&header)))
            })?
            .get()
            .header;
        out.push((hold(&triple.get_item(0)?)?, triple.get_item(1)?.extract::<usize>()?, header));
    }
    Ok(out)
}

#[pymethods]
impl ColumnBuilder {
    /// A builder of the named columns (offset, timestamp, sequence, batch_index, key, value,
    /// headers), every one when None: columns left out are not decoded into buffers.
    #[new]
    #[pyo3(signature = (columns=None))]
    fn new(columns: Option<Vec<String>>) -> PyResult<Self> {
        let wanted = match columns {
            None => Wanted::ALL,
            Some(names) => Wanted::from_names(names.iter().map(String::as_str)).map_err(to_py)?,
        };
        Ok(ColumnBuilder { columns: RecordColumns::with_columns(wanted) })
    }

    /// Decode the records of the batch `header` (parsed at `buf[position]`) and append those at
    /// offsets in [start_offset, end_offset); returns how many rows were added. A corrupt batch
    /// adds nothing.
    #[pyo3(signature = (buf, position, header, *, start_offset=i64::MIN, end_offset=i64::MAX),
           text_signature = "(self, /, buf, position, header, *, start_offset=-9223372036854775808, \
                             end_offset=9223372036854775807)")]
    fn add(
        &mut self,
        buf: &Bound<'_, PyAny>,
        position: usize,
        header: &Bound<'_, BatchHeader>,
        start_offset: i64,
        end_offset: i64,
    ) -> PyResult<usize> {
        let header = &header.get().header;
        with_bytes(buf, |buf| self.columns.add(buf, position, header, start_offset, end_offset).map_err(to_py))
    }

    /// `add` for every (buffer, position, header) of `spans`, in order, in one call that runs
    /// without the GIL once the spans hold DETACH_BYTES or more. Stops at the first corrupt
    /// batch (which adds nothing) with its error; `batches` then counts the ones added before.
    #[pyo3(signature = (spans, *, start_offset=i64::MIN, end_offset=i64::MAX),
           text_signature = "(self, /, spans, *, start_offset=-9223372036854775808, \
                             end_offset=9223372036854775807)")]
    fn add_batches(
        &mut self,
        py: Python<'_>,
        spans: &Bound<'_, PyAny>,
        start_offset: i64,
        end_offset: i64,
    ) -> PyResult<usize> {
        let held = held_spans(spans)?;
        let spans: Vec<Span<'_>> = held
            .iter()
            .map(|(buf, position, header)| Span { buf: buf.slice(), position: *position, header: *header })
            .collect();
        let bytes: usize = spans.iter().map(|s| s.header.size()).sum();
        let columns = &mut self.columns;
        let mut run = move || columns.add_all(&spans, start_offset, end_offset);
        if bytes >= DETACH_BYTES { py.detach(run) } else { run() }.map_err(to_py)
    }

    #[getter]
    fn rows(&self) -> usize {
        self.columns.rows()
    }

    /// How many batches were added (by add or add_batches) since the last finish: the next batch_index.
    #[getter]
    fn batches(&self) -> i32 {
        self.columns.batches()
    }

    /// The columns as read-only buffers (ColumnBuffer: handed over, not copied), which empties
    /// the builder: offset/timestamp int64 LE, sequence and batch_index int32 LE, key_/value_
    /// {offsets int32, data, validity bitmap or None, nulls}, headers as header_offsets (int32
    /// list offsets) into header_key_* / header_value_* binary columns. A column the builder
    /// was not asked for is empty.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.columns.take().into_parts();
        let out = PyDict::new(py);
        out.set_item("rows", c.rows)?;
        out.set_item("offset", buffer(py, c.offset)?)?;
        out.set_item("timestamp", buffer(py, c.timestamp)?)?;
        out.set_item("sequence", buffer(py, c.sequence)?)?;
        out.set_item("batch_index", buffer(py, c.batch_index)?)?;
        export(py, &out, "key", c.key)?;
        export(py, &out, "value", c.value)?;
        out.set_item("header_offsets", buffer(py, c.header_offsets)?)?;
        export(py, &out, "header_key", c.header_key)?;
        export(py, &out, "header_value", c.header_value)?;
        Ok(out)
    }
}
