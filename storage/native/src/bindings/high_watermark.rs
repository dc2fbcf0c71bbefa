//! The high watermark file's bytes for storage/high_watermark.py (`encode`, `decode`): the layout
//! lives in high_watermark.rs, which the quiet append's pwrite (append.rs) encodes with too.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::ffi::with_bytes;
use crate::high_watermark;

/// The file's 14 bytes for `high_watermark`.
#[pyfunction]
pub fn encode_high_watermark(py: Python<'_>, high_watermark: i64) -> Bound<'_, PyBytes> {
    PyBytes::new(py, &high_watermark::encode(high_watermark))
}

/// The HW `data` holds, or -1 (storage.high_watermark.UNREADABLE): short, another version, a bad
/// CRC, a negative value.
#[pyfunction]
pub fn decode_high_watermark(data: &Bound<'_, PyAny>) -> PyResult<i64> {
    with_bytes(data, |d| Ok(high_watermark::decode(d)))
}
