//! The four codecs (compression.rs) over any Python buffer: storage/compression.py's backend.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::errors::to_py;
use super::ffi::with_bytes;
use crate::compression;

/// `data` compressed with `codec` (1-4) in the stream format Kafka's Java client writes.
#[pyfunction]
pub fn compress<'py>(py: Python<'py>, codec: u8, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let out = with_bytes(data, |d| compression::compress(codec, d).map_err(to_py))?;
    Ok(PyBytes::new(py, &out))
}

/// `data` inflated from `codec` (1-4); CodecError for a stream the Java reader would refuse.
#[pyfunction]
pub fn decompress<'py>(py: Python<'py>, codec: u8, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let out = with_bytes(data, |d| compression::decompress(codec, d).map_err(to_py))?;
    Ok(PyBytes::new(py, &out))
}
