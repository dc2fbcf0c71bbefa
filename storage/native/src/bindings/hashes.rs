//! The two hashes Kafka's clients compute over bytes: CRC-32C (a batch's checksum) and
//! murmur2 (a keyed record's partition).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use super::ffi::{type_name, with_bytes};
use crate::encoder;

/// CRC-32C (Castagnoli) of `data`, continuing from `value`, as the crc32c package spells it.
#[pyfunction(name = "crc32c")]
#[pyo3(signature = (data, value=0))]
pub fn crc32c_py(data: &Bound<'_, PyAny>, value: u32) -> PyResult<u32> {
    with_bytes(data, |d| Ok(crc32c::crc32c_append(value, d)))
}

/// Kafka's murmur2 partition of every key (bytes-like or str as UTF-8); -1 for a None key,
/// which the caller places by the sticky rule instead.
#[pyfunction]
pub fn murmur2_partitions<'py>(py: Python<'py>, keys: &Bound<'py, PyAny>, count: u32) -> PyResult<Bound<'py, PyList>> {
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
            with_bytes(&key, |d| Ok(encoder::murmur2_partition(d, count) as i64)).map_err(|_| {
                PyTypeError::new_err(format!(
                    "key at index {index} must be bytes, bytearray, memoryview, str or None, not {}",
                    type_name(&key)
                ))
            })?
        };
        out.push(partition);
    }
    PyList::new(py, out)
}
