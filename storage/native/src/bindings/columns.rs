//! `ColumnBuilder`: columns.rs's `RecordColumns` as a Python class (storage.arrow_records).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use super::errors::to_py;
use super::ffi::with_bytes;
use super::header::BatchHeader;
use crate::columns::{BinaryColumn, RecordColumns};

/// Decoded records gathered column by column for Arrow (see `finish` for the layout).
/// Batches are added one by one; nothing Python is created per record.
#[pyclass(module = "storage._native")]
#[derive(Default)]
pub struct ColumnBuilder {
    columns: RecordColumns,
}

fn export<'py>(py: Python<'py>, out: &Bound<'py, PyDict>, prefix: &str, column: &BinaryColumn) -> PyResult<()> {
    out.set_item(format!("{prefix}_offsets"), PyBytes::new(py, &column.offsets()))?;
    out.set_item(format!("{prefix}_data"), PyBytes::new(py, column.data()))?;
    out.set_item(format!("{prefix}_validity"), column.validity().map(|v| PyBytes::new(py, v)))?;
    out.set_item(format!("{prefix}_nulls"), column.nulls())?;
    Ok(())
}

#[pymethods]
impl ColumnBuilder {
    #[new]
    fn new() -> Self {
        ColumnBuilder::default()
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

    #[getter]
    fn rows(&self) -> usize {
        self.columns.rows()
    }

    /// How many add() calls succeeded: the next batch_index.
    #[getter]
    fn batches(&self) -> i32 {
        self.columns.batches()
    }

    /// The columns as bytes: offset/timestamp int64 LE, sequence and batch_index int32 LE,
    /// key_/value_ {offsets int32, data, validity bitmap or None, nulls}, headers as
    /// header_offsets (int32 list offsets) into header_key_* / header_value_* binary columns.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.columns;
        let out = PyDict::new(py);
        out.set_item("rows", c.rows())?;
        out.set_item("offset", PyBytes::new(py, c.offset()))?;
        out.set_item("timestamp", PyBytes::new(py, c.timestamp()))?;
        out.set_item("sequence", PyBytes::new(py, c.sequence()))?;
        out.set_item("batch_index", PyBytes::new(py, c.batch_index()))?;
        export(py, &out, "key", c.key())?;
        export(py, &out, "value", c.value())?;
        out.set_item("header_offsets", PyBytes::new(py, &c.header_offsets()))?;
        export(py, &out, "header_key", c.header_key())?;
        export(py, &out, "header_value", c.header_value())?;
        Ok(out)
    }
}
