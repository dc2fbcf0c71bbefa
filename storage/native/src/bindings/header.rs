//! `BatchHeader`: the checked header of one batch. Constructing one parses it; every decoder of
//! the batch's records takes it. storage.records.RecordBatch is its Python subclass.
//!
//! Why a frozen class of int objects, subclassed: RecordBatch.parse runs once per batch on the
//! read path and its thirteen header fields are read everywhere after. The ints are created once,
//! by the constructor (as a tuple's would be); a frozen class exposes `Py` fields as struct
//! members, which Python reads as fast as a `__slots__` attribute (a getter would cost a call per
//! read); and a RecordBatch *is* its header, so nothing is copied from one object to another. The
//! decoded `codec::Header` stays beside the ints, so a decoder takes the batch itself with no
//! conversion back.

use pyo3::prelude::*;
use pyo3::types::PyInt;

use super::errors::to_py;
use super::ffi::with_bytes;
use crate::codec::{self, Header};

/// The 13 fields of a batch's 61 header bytes (docs/kafka-formats.md §1.1), after the checks
/// of codec::parse_header.
#[pyclass(frozen, subclass, module = "storage._native")]
pub struct BatchHeader {
    pub(crate) header: Header,
    #[pyo3(get)]
    base_offset: Py<PyInt>,
    #[pyo3(get)]
    batch_length: Py<PyInt>,
    #[pyo3(get)]
    partition_leader_epoch: Py<PyInt>,
    #[pyo3(get)]
    magic: Py<PyInt>,
    #[pyo3(get)]
    crc: Py<PyInt>,
    #[pyo3(get)]
    attributes: Py<PyInt>,
    #[pyo3(get)]
    last_offset_delta: Py<PyInt>,
    #[pyo3(get)]
    base_timestamp: Py<PyInt>,
    #[pyo3(get)]
    max_timestamp: Py<PyInt>,
    #[pyo3(get)]
    producer_id: Py<PyInt>,
    #[pyo3(get)]
    producer_epoch: Py<PyInt>,
    #[pyo3(get)]
    base_sequence: Py<PyInt>,
    #[pyo3(get)]
    records_count: Py<PyInt>,
}

impl BatchHeader {
    fn new(py: Python<'_>, h: Header) -> Self {
        let int = |v: i64| PyInt::new(py, v).unbind();
        BatchHeader {
            header: h,
            base_offset: int(h.base_offset),
            batch_length: int(h.batch_length.into()),
            partition_leader_epoch: int(h.partition_leader_epoch.into()),
            magic: int(h.magic.into()),
            crc: int(h.crc.into()),
            attributes: int(h.attributes.into()),
            last_offset_delta: int(h.last_offset_delta.into()),
            base_timestamp: int(h.base_timestamp),
            max_timestamp: int(h.max_timestamp),
            producer_id: int(h.producer_id),
            producer_epoch: int(h.producer_epoch.into()),
            base_sequence: int(h.base_sequence.into()),
            records_count: int(h.records_count.into()),
        }
    }

    /// The producer id and epoch objects, shared by every record a decoder makes.
    pub(crate) fn producer<'py>(&self, py: Python<'py>) -> (Bound<'py, PyAny>, Bound<'py, PyAny>) {
        (self.producer_id.bind(py).clone().into_any(), self.producer_epoch.bind(py).clone().into_any())
    }
}

#[pymethods]
impl BatchHeader {
    /// The header of the batch at `buf[position]` after checking magic, length, extent and (with
    /// `verify_crc`) the CRC; CodecError (positions are `position`) otherwise.
    #[new]
    #[pyo3(signature = (buf, position, verify_crc=true))]
    fn parse(py: Python<'_>, buf: &Bound<'_, PyAny>, position: usize, verify_crc: bool) -> PyResult<Self> {
        let header = with_bytes(buf, |d| codec::parse_header(d, position, verify_crc).map_err(to_py))?;
        Ok(BatchHeader::new(py, header))
    }

    fn __repr__(&self) -> String {
        let h = &self.header;
        format!(
            "BatchHeader(base_offset={}, batch_length={}, partition_leader_epoch={}, magic={}, crc={}, \
             attributes={}, last_offset_delta={}, base_timestamp={}, max_timestamp={}, producer_id={}, \
             producer_epoch={}, base_sequence={}, records_count={})",
            h.base_offset,
            h.batch_length,
            h.partition_leader_epoch,
            h.magic,
            h.crc,
            h.attributes,
            h.last_offset_delta,
            h.base_timestamp,
            h.max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.records_count
        )
    }
}
