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

/// How many bytes `data` inflates to from `codec` (0-4), inflating it in blocks without holding
/// them; CodecError 'too_large' past `inflation_limit(len(data))`, as `decompress` would refuse.
#[pyfunction]
pub fn inflated_size(py: Python<'_>, codec: u8, data: &Bound<'_, PyAny>) -> PyResult<u64> {
    with_bytes(data, |d| py.detach(|| compression::inflated_size(codec, d)).map_err(to_py))
}

/// Whether `data`, a `codec` stream this process's own encoder built, is certainly within its
/// inflation limit without inflating it (the append path's check of trusted bytes).
#[pyfunction]
pub fn own_stream_within_limit(codec: u8, data: &Bound<'_, PyAny>) -> PyResult<bool> {
    with_bytes(data, |d| Ok(compression::own_stream_within_limit(codec, d)))
}

/// The most a records region of `compressed_len` bytes may inflate to (docs/kafka-formats.md §1.4).
#[pyfunction]
pub fn inflation_limit(compressed_len: usize) -> u64 {
    compression::inflation_limit(compressed_len)
}
